"""Versioned releases: their record and current link, their venv and what it really holds, the deploy lock."""
