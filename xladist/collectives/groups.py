"""Collective group modes and replica groups -> ordered lists of participating devices.

The implementation is xladist/hlo/collective_groups.py (pure Python, shared with the verifier
and the static deadlock check; imports point down, so it lives below this package). This
module keeps the MPI layer's names working.

``group_mode`` here is the flag form ``group_mode(has_channel, use_global_device_ids)``
(``use_global_device_ids`` is ``None`` for ops without the flag); the verifier's
``group_mode(opcode, channel_id, flag)`` is ``xladist.hlo.collective_groups.group_mode``.
"""

from __future__ import annotations

from xladist.hlo.collective_groups import (
    DeviceAssignment,
    GroupError,
    GroupMode,
    check_replica_groups,
    collective_permute_pairs,
    device_groups,
    groups_for_device,
    instruction_device_groups,
    iota_replica_groups,
    permute_device_groups,
)
from xladist.hlo.collective_groups import group_mode_from_flags as group_mode

__all__ = [
    "DeviceAssignment",
    "GroupError",
    "GroupMode",
    "check_replica_groups",
    "collective_permute_pairs",
    "device_groups",
    "group_mode",
    "groups_for_device",
    "instruction_device_groups",
    "iota_replica_groups",
    "permute_device_groups",
]
