#!/usr/bin/env python3
"""Run llama.cpp's own convert_hf_to_gguf.py on a dsa checkpoint that has no tokenizer.

Usage: llamacpp_convert.py LLAMA_CPP_DIR MODEL_DIR [convert_hf_to_gguf.py options...]

dsa's checkpoints (models/tiny-random, dsa_make_tiny_model's output) are config.json +
model.safetensors only. llama.cpp's DeepseekV32Model.set_vocab() loads a Hugging Face
tokenizer with transformers.AutoTokenizer and identifies its BPE pre-tokenizer by hashing
the token ids of a fixed text; a generated stub tokenizer.json cannot match any known hash,
so the unmodified converter stops there. This wrapper changes exactly one thing: when the
model directory has no tokenizer files, set_vocab() writes the converter's own "no vocab"
stub (tokenizer.ggml.model = "none", via ModelBase._set_vocab_none); with the
deepseek32.vocab_size key llama.cpp then creates vocab_size dummy tokens. Every tensor,
hyperparameter and the FP8 dequantization go through the unmodified converter.
llama-batched-bench and llama-bench feed random token ids, so no text tokenizer is needed.
"""
import sys
from pathlib import Path


def main() -> None:
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    llama_dir = Path(sys.argv[1]).resolve()
    model_dir = Path(sys.argv[2])
    sys.path.insert(0, str(llama_dir))
    sys.path.insert(1, str(llama_dir / "gguf-py"))

    import conversion.deepseek as deepseek  # noqa: E402  (llama.cpp's conversion package)

    cls = deepseek.DeepseekV32Model
    original_set_vocab = cls.set_vocab

    def set_vocab(self) -> None:
        has_tokenizer = any((self.dir_model / f).is_file()
                            for f in ("tokenizer.json", "tokenizer.model", "tokenizer_config.json"))
        if has_tokenizer:
            original_set_vocab(self)
            return
        self._set_vocab_none()
        key = f"{self.gguf_writer.arch}.vocab_size"
        if not any(key in kv for kv in self.gguf_writer.kv_data):  # DeepseekV2Model writes it
            self.gguf_writer.add_vocab_size(self.hparams["vocab_size"])

    cls.set_vocab = set_vocab

    import convert_hf_to_gguf  # noqa: E402

    sys.argv = [str(llama_dir / "convert_hf_to_gguf.py"), str(model_dir)] + sys.argv[3:]
    convert_hf_to_gguf.main()


if __name__ == "__main__":
    main()
