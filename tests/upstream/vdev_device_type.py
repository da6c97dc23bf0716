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


def claim_cpu_and_cuda_dtypes_for_vdev():
    """Makes OpInfo's dtype claims for vdev the CPU's and CUDA's together, when a test asks.

    OpInfo gives a device without claims of its own the CPU's `dtypes` (the accelerators
    it knows, ROCm and XPU, inherit CUDA's). vdev takes every dtype its CPU kernels take
    and, as CUDA, the accelerator dtypes (`dtypesIfCUDA` beyond `dtypes`: float16 FFTs,
    integer `histc`, ...; README "Tensor kinds"), which test_dtypes checks against the
    claims. Patched when the first vdev test runs (setUp; instantiation calls setUpClass
    to learn the device), after every test was instantiated: the dtypes @ops instantiates
    stay the CPU's, so each vdev test has its CPU twin (claiming CUDA's too would add
    vdev-only tests of the accelerator dtypes).
    """
    from torch.testing._internal.opinfo.core import OpInfo

    if getattr(OpInfo.supported_dtypes, "claims_cpu_and_cuda_dtypes_for_vdev", False):
        return
    backend = torch._C._get_privateuse1_backend_name()  # noqa: F821

    def is_vdev(device_type):
        return device_type == "privateuse1" or torch.device(device_type).type == backend  # noqa: F821

    def of_cpu_and_cuda(claim):
        def claimed(self, device_type):
            if not is_vdev(device_type):
                return claim(self, device_type)
            return set(claim(self, "cpu")) | set(claim(self, "cuda"))

        claimed.claims_cpu_and_cuda_dtypes_for_vdev = True
        return claimed

    OpInfo.supported_dtypes = of_cpu_and_cuda(OpInfo.supported_dtypes)
    OpInfo.supported_backward_dtypes = of_cpu_and_cuda(OpInfo.supported_backward_dtypes)


class VdevTestBase(PrivateUse1TestBase):  # noqa: F821
    # The backend's name from the start (PrivateUse1TestBase says "privateuse1" until
    # its setUpClass runs): classes are named TestFooVDEV, and @dtypesIfPRIVATEUSE1 and
    # @skipPRIVATEUSE1If, which key on the backend's name, apply.
    device_type = torch._C._get_privateuse1_backend_name()  # noqa: F821
    # Lets @onlyCUDA (any @onlyOn) tests run on vdev too: opt-in, as many of them
    # test CUDA-only behaviour.
    bypass_device_restrictions = os.environ.get("VDEV_UPSTREAM_BYPASS_DEVICE_RESTRICTIONS") == "1"

    def setUp(self):
        super().setUp()
        claim_cpu_and_cuda_dtypes_for_vdev()

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
