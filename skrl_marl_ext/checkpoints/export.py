"""Checkpoints for skrl's agents to play: models and preprocessors of any of our checkpoints, in skrl's format.

A checkpoint of ours written with a config skrl has (one learning rate for policy and value, no option of ours) loads
into skrl 2.1.1's MAPPO/IPPO as it is. One that holds what skrl cannot load (two learning rates, a ValueNorm value
preprocessor, MADDPG's modules) is exported here to a file skrl's agent loads for play::

    skrl_marl_ext.export_for_skrl("runs/.../checkpoints/final.pt", "play.pt")   # or: skrl-marl export CKPT --out PATH
    agent.load("play.pt")                                                          # skrl's MAPPO/IPPO
"""

from __future__ import annotations

import os

from skrl_marl_ext.checkpoints import check_finite, check_layout, is_scaler_state, read_checkpoint
from skrl_marl_ext.checkpoints.files import remove_temporary_files, save_torch

PLAY_MODULES = ("policy", "value", "observation_preprocessor", "state_preprocessor", "value_preprocessor")
"""What an exported file keeps of each agent (``value_preprocessor`` only as skrl's ``RunningStandardScaler``)."""

LEFT_OUT = (
    "left out: optimizer, LR scheduler, grad scaler, ValueNorm statistics, MADDPG critics and targets, replay "
    "memory (enough to play, not to resume training)"
)
"""What :func:`export_for_skrl` does not write, in one line."""


def export_for_skrl(src_path: str | os.PathLike, dst_path: str | os.PathLike) -> str:
    """Write the models and preprocessors of checkpoint ``src_path`` (written by our MAPPO, IPPO, HAPPO or MADDPG) to
    ``dst_path``, a ``{agent: {module: state_dict}}`` file that skrl 2.1.1's MAPPO/IPPO ``load()`` reads for play.

    Kept per agent: ``policy``, ``value``, ``observation_preprocessor``, ``state_preprocessor``, and
    ``value_preprocessor`` when it is a ``RunningStandardScaler``'s state (a MADDPG file has no ``value``). The source
    is read with ``weights_only=True``; the tensors are written on the CPU.

    :param src_path: Our checkpoint (``agent.save()``, or the trainer's ``checkpoints/*.pt``).
    :param dst_path: The file to write (whole or not at all, :func:`~skrl_marl_ext.checkpoints.files.write_atomic`);
        the temporary files that exports to it killed mid-write left beside it are removed (none of another name, none
        a live write holds).
    :return: The one line saying what the export leaves out (:data:`LEFT_OUT`).
    :raises ValueError: In one line, when ``src_path`` is not a multi-agent checkpoint (see
        :func:`~skrl_marl_ext.checkpoints.read_checkpoint`) or what it exports holds NaN or inf.
    """
    owner = "export_for_skrl"
    modules = check_layout(read_checkpoint(src_path, map_location="cpu", owner=owner), src_path, owner=owner)
    exported = {
        uid: {
            name: entries[name]
            for name in PLAY_MODULES
            if name in entries and (name != "value_preprocessor" or is_scaler_state(entries[name]))
        }
        for uid, entries in modules.items()
    }
    if not any(exported.values()):
        raise ValueError(f"{owner}: {src_path} holds no policy, value or preprocessor of any agent: nothing to export")
    for uid, entries in exported.items():
        for name, state in entries.items():
            check_finite(state, src_path, owner=owner, uid=uid, name=name)
    folder, target = os.path.split(os.path.abspath(dst_path))
    remove_temporary_files(folder, name=target)
    save_torch(exported, dst_path)
    return LEFT_OUT


__all__ = ["LEFT_OUT", "PLAY_MODULES", "export_for_skrl"]
