"""qkv.Config against its source, the C struct qkv_model_config in the public
headers (include/): the extension lists one (name, type) row per struct field
(CONFIG_FIELDS, its qkv_rope flattened to rope_*), then what the open model
adds; python/qkv makes Config from that list. A field added to the struct
without a row, or a row without a field, fails here."""
import dataclasses
import pathlib
import re

import qkv
from qkv import _qkv
from conftest import ROOT

# what the open model adds after the struct's fields (model.c's open rows)
OPEN = ("n_ctx", "bos", "eos", "path", "layers")
# struct fields with no row, and why: a pointer into the weights
SKIPPED = {"rope_freq_factors"}


def struct_fields(name):
    """The field names of `typedef struct { ... } name;` in include/**/*.h, in order."""
    for header in sorted(pathlib.Path(ROOT, "include").rglob("*.h")):
        text = re.sub(r"/\*.*?\*/", "", header.read_text(encoding="utf-8"), flags=re.S)
        m = re.search(r"typedef struct\s*\{([^{}]*)\}\s*" + name + r"\s*;", text)
        if m:
            out = []
            for decl in filter(None, (d.strip() for d in m.group(1).split(";"))):
                kind, first = re.match(r"((?:const\s+)?\w+)\s+(.*)", decl).groups()
                out += [(kind, re.match(r"\**\s*(\w+)", v.strip()).group(1)) for v in first.split(",")]
            return out
    raise AssertionError(f"no typedef struct {name} in include/")


def config_fields_in_header():
    """qkv_model_config's fields as Config names them: the qkv_rope field flattened to rope_<field>."""
    names = []
    for kind, field in struct_fields("qkv_model_config"):
        if kind == "qkv_rope":
            names += [f"{field}_{sub}" for _, sub in struct_fields("qkv_rope")]
        else:
            names.append(field)
    return [n for n in names if n not in SKIPPED]


def test_rows_are_the_struct_fields():
    names = [name for name, _ in _qkv.CONFIG_FIELDS]
    assert names[len(names) - len(OPEN):] == list(OPEN)
    assert names[:len(names) - len(OPEN)] == config_fields_in_header()


def test_python_config_is_made_from_the_rows():
    assert [(f.name, f.type) for f in dataclasses.fields(qkv.Config)] == list(_qkv.CONFIG_FIELDS)


def test_every_row_has_its_value(smollm2, gemma3):
    for c in (smollm2.config, gemma3.config):
        for name, kind in _qkv.CONFIG_FIELDS:
            assert isinstance(getattr(c, name), kind), name
    s, g = smollm2.config, gemma3.config
    assert (s.arch, s.rope_pairing, s.rope_scaling, s.ffn_act, s.qk_norm) == ("llama", "interleaved", "none", "silu", False)
    assert (g.arch, g.rope_pairing, g.ffn_act, g.qk_norm, g.post_norms) == ("gemma3", "half", "gelu_tanh", True, True)
