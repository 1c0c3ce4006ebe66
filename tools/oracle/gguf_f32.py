"""gguf_f32.py — a GGUF with every tensor dequantised to F32, for llama.cpp
runs that multiply in float32 as transformers does (compare_llamacpp.py,
make_gemma3_fixtures.py). Pinned as the other scripts (requirements.txt)."""
import numpy as np


def dequantised_f32_gguf(src, dst):
    """The same GGUF (its own architecture and metadata) with every tensor
    dequantised to F32 (gguf.quants.dequantize, as transformers does at load):
    llama.cpp then multiplies in float32 (no 8-bit activations)."""
    import gguf
    from gguf import GGUFReader, GGUFValueType
    r = GGUFReader(src)
    w = gguf.GGUFWriter(dst, arch=r.fields["general.architecture"].contents())
    for k, fl in r.fields.items():
        if k.startswith("GGUF.") or k == "general.architecture":
            continue
        if k == "general.file_type":
            w.add_uint32(k, int(gguf.LlamaFileType.ALL_F32))
        elif fl.types[0] == GGUFValueType.ARRAY:
            w.add_key_value(k, fl.contents(), fl.types[0], sub_type=fl.types[-1])
        else:
            w.add_key_value(k, fl.contents(), fl.types[0])
    for t in r.tensors:
        w.add_tensor(t.name, gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
