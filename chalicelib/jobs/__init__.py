"""Scheduled functions: the sweeper, the scheduled-email releaser, idle queue retirement, dead-letter reconciliation."""
