"""Evaluation harness: tasks, reference model, runner, statistics, cost and reports."""
