"""The framework's view of the GPUs, for ``unilab mps doctor``: whether CUDA is available to
it and, for each device it numbers, its name and UUID. ``unilab mps doctor --python PYTHON``
runs this file's source with PYTHON, which imports torch and prints the view as JSON; the
package's ``doctor(torch_module=...)`` calls :func:`view` on the module it was given. unilab
compares the view with its own (the visible GPUs under the mask, in CUDA's order); the rule
lives there, not here.
"""

import json
from typing import Any


def view(torch: Any) -> "dict[str, Any]":
    cuda = torch.cuda
    available = bool(cuda.is_available())
    devices = []
    if available:
        for index in range(int(cuda.device_count())):
            props = cuda.get_device_properties(index)
            uuid = getattr(props, "uuid", None)
            devices.append(
                {
                    "index": index,
                    "name": str(getattr(props, "name", "")),
                    "uuid": None if uuid is None else str(uuid),
                }
            )
    return {
        "module": str(getattr(torch, "__name__", "torch")),
        "version": str(getattr(torch, "__version__", "")),
        "cuda_available": available,
        "devices": devices,
        "error": None,
    }


if __name__ == "__main__":
    try:
        import torch

        found = view(torch)
    except Exception as e:  # what unilab reports: the framework could not say
        found = {"error": f"{type(e).__name__}: {e}"}
    print(json.dumps(found))
