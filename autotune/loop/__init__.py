"""The tuning loop: its state, the pure decisions (keep rule, verdicts), ask/tell and its drivers."""
