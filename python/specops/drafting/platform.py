"""The device a builder's schedules are planned for: ModelConfig's num_cube_cores,
num_vector_cores and soc_version, each as given or, when None, read from the builder's NPU, and
the sas variant that follows from the SoC.

The drafting layer follows the schedule ops' rule (docs/sas_metadata.md, "Core counts and SoC"):
a default (the old 24 / 48 / "Ascend910B1") gave a silently wrong schedule on a chip with other
counts, so a count or SoC left out is read from the NPU (torch_npu's device properties, else the
SoC name's table, cached per device: specops.ascend_platform), and off the NPU it is an
error naming it. The result is the builder's own record (DraftMetadataBuilder.platform), never
written into the ModelConfig: one config may serve builders on several devices.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from specops.ascend_platform import plans_on_host, resolved_platform
from specops.drafting.configs import ModelConfig, check_core_counts, check_variant_heads, sas_variant_of
from specops.sas_layout import ASCEND950

_ARGUMENTS = ("num_cube_cores", "num_vector_cores", "soc_version")


class DraftPlatform(NamedTuple):
    """What a builder's schedules are planned for (every field set)."""

    num_cube_cores: int
    num_vector_cores: int
    soc_version: str
    sas_variant: str  # "a2a3" (sas_metadata) or "a5" (kv_quant_sas_metadata)

    @property
    def ascend950(self) -> bool:
        """The schedule ops' ascend950 flag (their tiling on an Ascend950 SoC)."""
        return ASCEND950 in self.soc_version


def resolved_draft_platform(model: ModelConfig, device: torch.device) -> DraftPlatform:
    """The model's platform for builders on `device`: what the model gives, the rest from the
    NPU `device` (resolved_platform: its cache is the schedule ops'). Off the NPU a ValueError
    names the first argument left out. sas_variant: the model's when set (given, or picked from
    a given soc_version), else picked from the device's SoC, its heads checked as the model's
    own are."""
    given = (model.num_cube_cores, model.num_vector_cores, model.soc_version)
    if None in given:
        missing = _ARGUMENTS[given.index(None)]
        if not plans_on_host(device):
            raise ValueError(f"{missing} must be given: the builder is on {device}, so there is no NPU to read it "
                             "from (pass ModelConfig's num_cube_cores, num_vector_cores and soc_version of the device "
                             "the schedules are for, or build on that NPU)")
        given = resolved_platform(num_cube_cores=given[0], num_vector_cores=given[1], soc_version=given[2],
                                  device=device)
        check_core_counts(given.num_cube_cores, given.num_vector_cores, f" (as {device} reports it)")
    num_cube_cores, num_vector_cores, soc_version = given
    sas_variant = model.sas_variant
    if sas_variant is None:
        sas_variant = sas_variant_of(soc_version)
        check_variant_heads(sas_variant, model.num_heads_q, f" (picked for {device}'s SoC {soc_version!r})")
    return DraftPlatform(num_cube_cores, num_vector_cores, soc_version, sas_variant)
