"""The traffic activities (`shift.py`: plan, move weights, scale, check health) and their inputs and outputs (`messages.py`); the pure plan they work out is `common/traffic`."""
