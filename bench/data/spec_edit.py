import os
import sys


def parse_config(path):
    """Reads KEY=VALUE lines, skipping blanks and comments."""
    with open(path) as f:
        lines = f.readlines()
    config = {}
    for line in lines:
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, value = line.split("=", 1)
        config[key.strip()] = value.strip()
    return config


def merge(base, override):
    out = dict(base)
    for key, value in override.items():
        out[key] = value
    return out


def main():
    if len(sys.argv) < 2:
        print("usage: config.py FILE [OVERRIDE]")
        return 1
    config = parse_config(sys.argv[1])
    if len(sys.argv) > 2 and os.path.exists(sys.argv[2]):
        config = merge(config, parse_config(sys.argv[2]))
    for key, value in sorted(config.items()):
        print(f"{key} = {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
