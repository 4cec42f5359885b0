"""May we use it? The licence of the model (config, README / model-card front matter, LICENSE
files in its folder) and of the dataset when the workload names one; flagged when missing or
restricted. The tool reads what the files declare; it is not legal advice."""
import os
import re

# Licences that allow commercial use and modification without field-of-use limits.
PERMISSIVE = {"apache-2.0", "mit", "bsd-2-clause", "bsd-3-clause", "bsd", "isc", "psf-2.0", "python-2.0",
              "cc0-1.0", "cc-by-4.0", "cc-by-3.0", "cc-by-sa-4.0", "cc-by-sa-3.0", "unlicense", "zlib",
              "bsl-1.0", "mpl-2.0", "odc-by", "pddl", "artistic-2.0"}
# Anything else (non-commercial, no-derivatives, use-restricted RAIL, vendor community licences,
# copyleft, "other") is "restricted": the team reviews it or lists it in licence.allowed.
_TEXT_SIGNATURES = [
    ("apache-2.0", r"Apache License,?\s+Version 2\.0"),
    ("mit", r"Permission is hereby granted, free of charge"),
    ("psf-2.0", r"PYTHON SOFTWARE FOUNDATION LICENSE VERSION 2|PSF LICENSE AGREEMENT FOR PYTHON"),
    ("bsd-3-clause", r"Neither the name of .* nor the names of its\s+contributors"),
    ("cc-by-4.0", r"Creative Commons Attribution 4\.0"),
    ("llama", r"LLAMA \d(\.\d)? COMMUNITY LICENSE"),
    ("gemma", r"Gemma Terms of Use"),
]


def _front_matter_licence(text):
    match = re.match(r"---\s*\n(.*?)\n---", text, re.S)
    if not match:
        return None
    for line in match.group(1).splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "license" and value.strip():
            return value.strip().strip("'\"").lower()
    return None


def _licence_from_text(text):
    for licence_id, pattern in _TEXT_SIGNATURES:
        if re.search(pattern, text, re.I):
            return licence_id
    return None


def find_model_licence(folder, config=None):
    """(licence id or None, where it was found)."""
    if config is not None:
        for key in ("license", "licence"):
            value = getattr(config, key, None)
            if isinstance(value, str) and value:
                return value.lower(), "config.json"
    if not folder or not os.path.isdir(folder):
        return None, None
    for name in ("README.md", "MODEL_CARD.md", "model_card.md"):
        path = os.path.join(folder, name)
        if os.path.isfile(path):
            with open(path, encoding="utf-8", errors="replace") as handle:
                found = _front_matter_licence(handle.read())
            if found:
                return found, f"{name} front matter"
    for name in sorted(os.listdir(folder)):
        if name.upper().startswith(("LICENSE", "LICENCE", "COPYING")):
            with open(os.path.join(folder, name), encoding="utf-8", errors="replace") as handle:
                found = _licence_from_text(handle.read())
            return (found or "unrecognised licence text"), name
    return None, None


def classify(licence_id, allowed=()):
    """"missing", "permissive", "allowed" (the team's list) or "restricted" (review)."""
    if not licence_id:
        return "missing"
    if licence_id in {a.lower() for a in allowed}:
        return "allowed"
    if licence_id in PERMISSIVE:
        return "permissive"
    return "restricted"


def check(model_folder, config, dataset, allowed):
    """The licence section of the report."""
    found, where = find_model_licence(model_folder, config)
    model = {"licence": found, "source": where, "status": classify(found, allowed)}
    data = None
    if dataset:
        if os.path.isdir(dataset):
            licence_id, source = find_model_licence(dataset)
        elif os.path.isfile(dataset):  # the card named, never a README or LICENSE beside it
            with open(dataset, encoding="utf-8", errors="replace") as handle:
                text = handle.read()
            licence_id, source = _front_matter_licence(text) or _licence_from_text(text), os.path.basename(dataset)
        else:
            licence_id, source = dataset.lower(), "workload file (licence.dataset)"
        data = {"licence": licence_id, "source": source, "status": classify(licence_id, allowed)}
    flags = []
    for what, entry in (("model", model), ("dataset", data)):
        if entry and entry["status"] in ("missing", "restricted"):
            flags.append(f"{what} licence {entry['status']}"
                         + (f": {entry['licence']} ({entry['source']})" if entry["licence"] else ""))
    return {"model": model, "dataset": data, "flags": flags,
            "note": "what the files declare, not legal advice"}
