"""The algorithms, one file per family, each in skrl's lifecycle order: :mod:`~skrl_marl_ext.algorithms.mappo`
(MAPPO and IPPO)."""
