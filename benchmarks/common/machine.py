"""Facts about the machine and software a result was measured on."""

from __future__ import annotations

import datetime
import os
import platform
from importlib import metadata
from typing import Any

import torch

from ppo_core.models.sampling_precision import cpu_model  # one home: the precision check keys its cache by it too
from tools.provenance import commit_at_start


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def machine_facts(device: str) -> dict[str, Any]:
    facts: dict[str, Any] = {
        "code": commit_at_start(),
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": cpu_model(),
        "logical_cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": _version("transformers"),
        "accelerate": _version("accelerate"),
        "trl": _version("trl"),
        "load_average_at_start": os.getloadavg(),
    }
    if device == "cuda" and torch.cuda.is_available():
        facts["gpu"] = torch.cuda.get_device_name(0)
        facts["tf32_matmul"] = torch.backends.cuda.matmul.allow_tf32
    return facts
