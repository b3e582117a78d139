"""The Prefect flows and their command lines. Importing the package first applies the project's
Prefect settings, whatever the working directory (flows/prefect_settings.py)."""

from flows import prefect_settings

prefect_settings.apply()
