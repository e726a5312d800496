"""The web console: every cluster's health, consumer lag with its history and a verdict, retention, the
mirrors and the completeness audit, read through our public client only."""
