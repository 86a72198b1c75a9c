"""One module per reproduction, each registering its :class:`~mwb.repro.api.Experiment` with ``@register``;
the registry imports every module here on first use."""
