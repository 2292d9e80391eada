import warnings

warnings.filterwarnings("ignore", message="transformer_engine module not found")
