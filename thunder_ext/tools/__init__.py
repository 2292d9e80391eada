"""What runs around the product: the demo (``demo``, its model in ``demo_model``), the command line (``cli``,
``extras``: what each command needs installed) and the pytest plugin (``pytest_plugin``: ``--thunder-ext``)."""
