import warnings

pytest_plugins = ["pytester"]  # tests of the --thunder-ext option run pytest in pytest

warnings.filterwarnings("ignore", message="transformer_engine module not found")
