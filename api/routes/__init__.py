"""HTTP routes, one module per noun; each handler is a few lines over ``api.submit``."""
