"""Every check of what a user hands the package, each failing with one line that names the input and the fix:

- :mod:`~skrl_marl_ext.checks.arguments`: an agent's constructor arguments, and one dry run of its models;
- :mod:`~skrl_marl_ext.checks.inputs`: what ``act`` and ``record_transition`` receive, every step;
- :mod:`~skrl_marl_ext.checks.values`: single config values (choices, ranges, unknown keys), for the configs'
  ``validate``;
- :mod:`~skrl_marl_ext.checks.configs`: a Runner (YAML) config, before anything is built from it.
"""
