"Loader tests: run offline (conftest blocks the network), with the real SmolLM2-135M-Instruct and MiniLM."
import socket, subprocess, sys, time

import numpy as np
import pytest
import torch

from maspob_etal.offline import NetworkBlocked, block_network
from maspob_etal.models import (chat_prompt, embed_texts, generate, load_causal_lm, loglik, minilm_path,
                                smollm2_gguf_path, _smollm2_cache)

@pytest.fixture(scope="module")
def smol():
    return load_causal_lm()

def test_network_is_blocked_in_tests():
    with pytest.raises(NetworkBlocked): socket.create_connection(("1.1.1.1", 443), timeout=1)
    with pytest.raises(NetworkBlocked): socket.getaddrinfo("huggingface.co", 443)

def test_network_is_blocked_in_child_processes():
    code = "import socket\ntry:\n socket.getaddrinfo('pypi.org', 443)\nexcept Exception as e: print(type(e).__name__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stdout
    assert "NetworkBlocked" in out

def test_block_network_context_restores():
    from maspob_etal import offline
    assert offline._ORIG  # on for the whole test session
    with block_network(): pass
    assert offline._ORIG  # still on: the context manager does not undo a block it did not start

def test_smollm2_second_load_is_fast_and_from_cache(smol, monkeypatch):
    from maspob_etal import models
    f = _smollm2_cache()/"model.safetensors"; assert f.exists()
    before = f.stat().st_mtime_ns
    def no_conversion(*a, **k): raise AssertionError("the cached model was converted again")
    monkeypatch.setattr(models, "_convert_gguf", no_conversion)     # a second load reads the cache, never the .gguf
    t0 = time.process_time(); model, tok = load_causal_lm(); dt = time.process_time() - t0
    assert f.stat().st_mtime_ns == before
    assert dt < 30.0, f"cached load took {dt:.1f} CPU-seconds"      # a conversion takes minutes; a load seconds
    assert sum(p.numel() for p in model.parameters()) == pytest.approx(134.5e6, rel=0.02)

def test_smollm2_answers(smol):
    model, tok = smol
    assert "Paris" in generate(model, tok, ["What is the capital of France?"], max_new_tokens=12)[0]

def test_generate_batched_equals_one_by_one(smol):
    model, tok = smol
    qs = ["Name a fruit.", "What is the opposite of hot?", "Say hello in French.", "What colour is grass?"]
    assert generate(model, tok, qs, max_new_tokens=10, batch_size=4) == [generate(model, tok, [q], max_new_tokens=10)[0] for q in qs]

def test_generate_stop_and_seeded_sampling(smol):
    model, tok = smol
    out = generate(model, tok, ["1, 2, 3, 4, 5, 6"], chat=False, max_new_tokens=10, stop=[","])
    assert "," not in out[0]
    a = generate(model, tok, ["Tell me a word."], do_sample=True, seed=3, max_new_tokens=6)
    assert a == generate(model, tok, ["Tell me a word."], do_sample=True, seed=3, max_new_tokens=6)
    with pytest.raises(TypeError): generate(model, tok, "not a list")

def test_loglik_batched_equals_one_by_one_and_manual(smol):
    model, tok = smol
    ps = [chat_prompt(tok, "What is 2 plus 2?"), "The capital of Italy is", "x"]
    cs = ["2 plus 2 is 4.", " Rome", " y z"]
    ll = loglik(model, tok, ps, cs, batch_size=3)
    assert np.allclose(ll, [loglik(model, tok, [p], [c])[0] for p, c in zip(ps, cs)], atol=1e-3)
    # manual: sum of per-token log-probs of the continuation tokens
    x = tok(ps[1], add_special_tokens=False)["input_ids"]; y = tok(cs[1], add_special_tokens=False)["input_ids"]
    ids = torch.tensor([x + y])
    with torch.no_grad(): lp = torch.log_softmax(model(ids).logits[0], -1)
    manual = sum(lp[len(x) + i - 1, t].item() for i, t in enumerate(y))
    assert ll[1] == pytest.approx(manual, abs=1e-3)
    assert loglik(model, tok, ["The capital of Italy is"], [" Rome"])[0] > loglik(model, tok, ["The capital of Italy is"], [" Oslo"])[0]
    with pytest.raises(ValueError, match="one continuation per prompt"): loglik(model, tok, ["a", "b"], ["c"])
    with pytest.raises(ValueError, match="reduce"): loglik(model, tok, ["a"], ["b"], reduce="max")

def test_load_errors():
    with pytest.raises(FileNotFoundError, match="does not exist"): load_causal_lm("/nonexistent/model/dir")
    with pytest.raises(FileNotFoundError, match="does not exist"): load_causal_lm("missing.gguf")
    with pytest.raises(FileNotFoundError, match="local Hugging Face cache"): load_causal_lm("no-such-org/no-such-model-xyz")

def test_embed_texts_similarity():
    E = embed_texts(["How do I bake bread?", "What is a recipe for making bread?", "The stock market fell today."])
    assert E.shape == (3, 384) and E.dtype == np.float32
    assert np.allclose(np.linalg.norm(E, axis=1), 1, atol=1e-5)
    assert E[0] @ E[1] > E[0] @ E[2] + 0.3
    assert np.allclose(embed_texts(["How do I bake bread?"]), E[:1], atol=1e-5)
    with pytest.raises(FileNotFoundError): embed_texts(["a"], model_path="/no/such/encoder")

def test_embed_texts_matches_sentence_transformers():
    st = pytest.importorskip("sentence_transformers")
    texts = ["A man is playing guitar.", "Offline tests never touch the network."]
    ref = st.SentenceTransformer(str(minilm_path()), device="cpu").encode(texts, normalize_embeddings=True)
    assert np.allclose(embed_texts(texts), ref, atol=1e-4)

def test_packaged_files_exist():
    assert smollm2_gguf_path().stat().st_size > 50e6
    assert (minilm_path()/"config.json").exists()
