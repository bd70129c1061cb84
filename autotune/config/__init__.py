"""The Job, its keys and values, the knob table, presets, bounded reads, the typed messages."""
