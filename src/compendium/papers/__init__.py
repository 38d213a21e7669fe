"""One module per paper; each exposes ``Config``, the method and ``run(config) -> Result``."""
