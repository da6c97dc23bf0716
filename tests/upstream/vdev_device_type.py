"""The vdev device type for PyTorch's device-generic tests: a TORCH_TEST_DEVICES file.

torch.testing._internal.common_device_type runs this file with its own module globals
(so PrivateUse1TestBase and device_type_test_bases are in scope and it must not import
common_device_type itself) and instantiates every device-generic test class for
TEST_CLASS too. run_pytorch_tests.py sets TORCH_TEST_DEVICES to this file, puts this
directory on PYTHONPATH and names the exclusion file in VDEV_UPSTREAM_EXCLUSIONS.
"""

import os

from exclusion_rules import load_exclusions

if PrivateUse1TestBase not in device_type_test_bases:  # noqa: F821
    raise RuntimeError(
        "no PrivateUse1 backend is registered: importing torch must load torch_vdev "
        "(install it, or put its python/ directory on PYTHONPATH)"
    )


class VdevTestBase(PrivateUse1TestBase):  # noqa: F821
    # The backend's name from the start (PrivateUse1TestBase says "privateuse1" until
    # its setUpClass runs): classes are named TestFooVDEV, and @dtypesIfPRIVATEUSE1 and
    # @skipPRIVATEUSE1If, which key on the backend's name, apply.
    device_type = torch._C._get_privateuse1_backend_name()  # noqa: F821
    # Lets @onlyCUDA (any @onlyOn) tests run on vdev too: opt-in, as many of them
    # test CUDA-only behaviour.
    bypass_device_restrictions = os.environ.get("VDEV_UPSTREAM_BYPASS_DEVICE_RESTRICTIONS") == "1"

    @classmethod
    def instantiate_test(cls, name, test, *, generic_cls=None):
        # common_device_type excludes generic names only; an exclusion may also name
        # one variant of a parametrized test, as its instantiated name without the
        # device: test_broadcast_fn_map, test_out_linalg_eig_float32.
        before = set(cls.__dict__)
        super().instantiate_test(name, test, generic_cls=generic_cls)
        excluded = cls._get_test_exclusions(generic_cls.__name__) if generic_cls else ()
        for added in set(cls.__dict__) - before:
            variant = name + added[len(name):].replace(f"_{cls.device_type}", "", 1)
            if variant != name and variant in excluded:
                delattr(cls, added)


VdevTestBase.set_test_configs(test_exclusions=load_exclusions(os.environ["VDEV_UPSTREAM_EXCLUSIONS"]))

# TEST_CLASS replaces the generic PrivateUse1TestBase, which would otherwise
# instantiate every test a second time for the same device.
device_type_test_bases.remove(PrivateUse1TestBase)  # noqa: F821
TEST_CLASS = VdevTestBase
