"""RePo's authors' published layout: its ``pe_config``."""
