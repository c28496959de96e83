"""Two runs' settings (config.json, the experiment= feature) compared: the model of a difference and its severity
(``compare``), and the lines ``ascend-tune compare-config`` prints (``render``). Standard library only."""
