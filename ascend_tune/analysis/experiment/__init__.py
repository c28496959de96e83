"""Two runs' settings (config.json, the experiment= feature) compared: a run's files read, its other ranks'
included (``read``), msprobe's config_check pack read as one (``msprobe_pack``), the model of a difference and its
severity (``compare``), and the lines ``ascend-tune compare-config`` prints (``render``). Standard library only."""
