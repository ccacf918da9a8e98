"""Storage of the algorithms: the on-policy rollout (:mod:`~skrl_marl_ext.storage.rollout`) and MADDPG's joint replay
with aligned sampling (:mod:`~skrl_marl_ext.storage.replay`)."""
