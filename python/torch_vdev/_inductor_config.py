"""What the code Inductor generates for vdev depends on besides torch and Inductor's
own config: torch_vdev's version and the sources that shape vdev's generated
wrappers (``_inductor.py``) and the extern kernels C++ wrappers call
(``c_shim_vdev.h``).

Inductor keys its FX graph cache on each device's codegen config (the
``device_custom_config`` of ``register_backend_for_device``), so a graph cached by
another torch_vdev (whose wrappers may lack a stream wait, or call C shim functions
that changed since) is compiled again instead of replayed.
"""

import hashlib
import sys

from torch.utils._config_module import install_config_module

from . import __version__, _inductor


def _sources_digest(*paths: str) -> str:
    digest = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as source:
            digest.update(source.read())
    return digest.hexdigest()


backend_version: str = __version__
codegen_sources_sha256: str = _sources_digest(_inductor.__file__, _inductor._C_SHIM_HEADER)

install_config_module(sys.modules[__name__])
