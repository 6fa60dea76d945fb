"""Configuration: the one settings class (``DECIDE_*``) and the API keys file."""
