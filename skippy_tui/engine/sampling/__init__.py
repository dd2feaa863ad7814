"""Sampling settings, public noise, and the verification rules."""
