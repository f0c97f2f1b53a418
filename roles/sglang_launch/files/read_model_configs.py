"""Print, as JSON, what the start gate reads from each model directory given as an argument: model
path -> file name -> text, for config.json, hf_quant_config.json, model.safetensors.index.json
(its metadata only: the weight map of a large model runs to megabytes) and the names of its .py
files (their text is not read). A path that is not a directory is left out; the gate then says it
cannot be read. Run on the host by roles/sglang_launch in check mode; reads only."""

import json
import os
import sys

CONFIGS = ("config.json", "hf_quant_config.json")
INDEX = "model.safetensors.index.json"


def read_text(path):
    with open(path, encoding="utf-8", errors="replace") as handle:
        return handle.read()


def model_files(directory):
    files = {}
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if not os.path.isfile(path):
            continue
        if name in CONFIGS:
            files[name] = read_text(path)
        elif name == INDEX:
            try:
                index = json.loads(read_text(path))
            except ValueError:
                files[name] = ""  # not JSON: the gate says so
                continue
            files[name] = json.dumps({"metadata": index.get("metadata")} if isinstance(index, dict) else index)
        elif name.endswith(".py"):
            files[name] = ""
    return files


def main(paths):
    out = {}
    for directory in paths:
        if os.path.isdir(directory):
            try:
                out[directory] = model_files(directory)
            except OSError:
                continue  # unreadable: left out, the gate says it cannot be read
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1:])
