"""Names of the entries the agents read from an env's step ``infos`` and write into the outputs of ``act``.

Every entry is optional: an env that gives none of them trains as with skrl's own agents. Envs of this package
(:mod:`skrl_marl_ext.envs`) write them; an Isaac Lab or user env may write them too.
"""

from __future__ import annotations

AGENT_MASK_KEY = "agent_mask"
"""``infos["agent_mask"][agent]``: bool ``(num_envs, 1)``, True where the agent acted in the step that produced these
infos (its transition is real). Transitions with False contribute nothing to any loss or statistic. Missing agents or
a missing key mean True."""

ACTION_MASK_KEY = "action_mask"
"""``infos["action_mask"][agent]``: bool ``(num_envs, num_actions)``, True where a discrete action is allowed in the
observations returned with these infos. Also the name of the mask inside a ``Dict`` observation space (PettingZoo's
convention) and in a model's ``inputs``."""

FINAL_OBSERVATIONS_KEY = "final_observations"
"""``infos["final_observations"][agent]``: ``(num_envs, obs_size)``, the last observation of the episode that ended in
this step, in the rows of the envs that ended (terminated or truncated) and reset in place; other rows are ignored.
Given only at steps where some env ended. The time-limit bootstrap of a truncated step uses ``V(final observation)``;
without this entry it falls back to ``V(s_t)`` of the truncated step (see ``time_limit_bootstrap``)."""

FINAL_STATES_KEY = "final_states"
"""``infos["final_states"][agent]``: ``(num_envs, state_size)`` or None, the global state matching
:data:`FINAL_OBSERVATIONS_KEY` (what ``env.state()`` would have returned before the reset)."""

MEAN_ACTIONS_KEY = "mean_actions"
"""Key of the deterministic (mean or greedy) actions, ``{agent: actions}``, in the outputs of ``act`` in evaluation
mode. skrl's trainers read ``outputs.get("mean_actions", actions)`` from the top level of the outputs; skrl 2.1.1's
multi-agents never put it there, so their evaluation silently samples."""

PRE_TANH_ACTIONS_KEY = "pre_tanh_actions"
"""Key of a deterministic policy's output before the ``tanh`` that maps it onto the action bounds, in the outputs of
its ``compute``/``act`` (:class:`~skrl_marl_ext.models.DeterministicMLP` gives it). MADDPG's
``cfg.policy_regularization`` penalises its square."""

__all__ = [
    "ACTION_MASK_KEY",
    "AGENT_MASK_KEY",
    "FINAL_OBSERVATIONS_KEY",
    "FINAL_STATES_KEY",
    "MEAN_ACTIONS_KEY",
    "PRE_TANH_ACTIONS_KEY",
]
