"""Storage of the algorithms: the on-policy rollout (:mod:`~skrl_marl_ext.storage.rollout`), MADDPG's joint replay
with aligned sampling (:mod:`~skrl_marl_ext.storage.replay`) and the NaN/inf check both use
(:mod:`~skrl_marl_ext.storage.non_finite`)."""
