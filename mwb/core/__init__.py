"""The shared parallel training core: configs, process groups, parallel layers, models, optimizer, trainer."""
