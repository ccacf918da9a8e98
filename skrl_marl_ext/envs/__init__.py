"""Environments: a small built-in cooperative env for tests and demos."""

from skrl_marl_ext.envs.spread import SpreadEnv, make_spread_env

__all__ = ["SpreadEnv", "make_spread_env"]
