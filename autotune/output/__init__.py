"""What a run leaves: the run folder, report, results, exporters' hand-over, plots, tracking."""
