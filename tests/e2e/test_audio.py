"""Audio in (src/audio/): decoding to 16 kHz mono and Whisper's log-mel spectrogram.

The C side is reached through ctypes on build/test/libsaragossa-internal.so (the library's twin
that exports its internal functions). The log-mel is compared with fixtures written by the
reference feature extractor (tools/make_audio_fixtures.py: transformers' WhisperFeatureExtractor);
decoding is checked on files written here, against the sine they hold: its frequency, amplitude
and length at 16 kHz, which a wrong rate or channel mix would change.
"""
import ctypes
import math
import os
import pathlib
import struct
import sys
import wave

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BIN = os.environ.get("SARAGOSSA_BIN", str(ROOT / "build" / "saragossa"))
LIB = pathlib.Path(BIN).parent / "test" / "libsaragossa-internal.so"
FIX = ROOT / "tests" / "fixtures" / "audio"
sys.path.insert(0, str(ROOT / "tools"))
from make_audio_fixtures import CASES, signal  # noqa: E402

N_FRAMES = 3000
TOL = 1e-4


class Audio(ctypes.Structure):
    _fields_ = [("samples", ctypes.POINTER(ctypes.c_float)), ("n", ctypes.c_size_t),
                ("src_rate", ctypes.c_int), ("src_channels", ctypes.c_int)]


@pytest.fixture(scope="module")
def lib():
    if not LIB.exists():
        pytest.skip(f"{LIB} not built (make test-e2e builds it)")
    lib = ctypes.CDLL(str(LIB))
    lib.sg_audio_log_mel.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
    lib.sg_audio_decode_file.argtypes = [ctypes.c_char_p, ctypes.POINTER(Audio)]
    lib.sg_audio_decode_memory.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.POINTER(Audio)]
    lib.sg_audio_from_pcm16.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                                        ctypes.POINTER(Audio)]
    lib.sg_audio_free.argtypes = [ctypes.POINTER(Audio)]
    lib.sg_last_error.restype = ctypes.c_char_p
    return lib


def log_mel(lib, x, n_mels):
    x = np.ascontiguousarray(x, dtype=np.float32)
    out = np.zeros((n_mels, N_FRAMES), dtype=np.float32)
    st = lib.sg_audio_log_mel(x.ctypes.data if x.size else None, x.size, n_mels, out.ctypes.data)
    assert st == 0, lib.sg_last_error().decode()
    return out


@pytest.mark.parametrize("name", sorted(CASES))
def test_log_mel_matches_the_reference_feature_extractor(lib, name):
    n_mels, seconds = CASES[name]
    ref = np.load(FIX / f"mel_{name}.npz")
    x = ref["signal"] if "signal" in ref else signal(name, seconds)
    got = log_mel(lib, x, n_mels)
    f = ref["frames"].shape[1]
    assert ref["frames"].shape[0] == n_mels
    assert np.abs(got[:, :f] - ref["frames"]).max() <= TOL
    assert np.abs(got[:, -8:] - ref["tail"]).max() <= TOL
    if not np.isnan(ref["rest"]):
        assert np.abs(got[:, f:-8] - ref["rest"]).max() <= TOL


def test_log_mel_of_silence_is_the_clamped_floor(lib):
    """All zeros: every bin is log10(1e-10) = -10, so (-10 + 4) / 4."""
    assert np.all(log_mel(lib, np.zeros(0, np.float32), 80) == np.float32(-1.5))


def test_log_mel_refuses_a_bin_count_out_of_range(lib):
    out = np.zeros((1, N_FRAMES), dtype=np.float32)
    assert lib.sg_audio_log_mel(None, 0, 0, out.ctypes.data) != 0
    assert b"n_mels = 0" in lib.sg_last_error()
    assert lib.sg_audio_log_mel(None, 0, 257, out.ctypes.data) != 0


# --- decoding ---------------------------------------------------------------------------------

def sine(rate, seconds, freq, amp):
    t = np.arange(int(rate * seconds)) / rate
    return amp * np.sin(2 * np.pi * freq * t)


def write_wav_int16(path, frames, rate):
    """frames: float [n][channels] in [-1, 1]."""
    data = np.clip(np.round(frames * 32767), -32768, 32767).astype("<i2")
    with wave.open(str(path), "wb") as w:
        w.setnchannels(frames.shape[1])
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(data.tobytes())


def write_wav_float(path, x, rate):
    """Mono IEEE float WAV (format 3), written by hand: the wave module writes PCM only."""
    data = np.asarray(x, "<f4").tobytes()
    fmt = struct.pack("<HHIIHH", 3, 1, rate, rate * 4, 4, 32)
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", len(data)) + data
    path.write_bytes(b"RIFF" + struct.pack("<I", len(body)) + body)


def tone(x):
    """(frequency in Hz, amplitude) of the sinusoid in 16 kHz x, away from the ends (the
    resampler's edges): the peak of a Hann-windowed DFT, interpolated, and sqrt(2) * RMS."""
    x = np.asarray(x[2000:-2000], dtype=np.float64)
    spec = np.abs(np.fft.rfft(x * np.hanning(x.size)))
    k = int(np.argmax(spec))
    a, b, c = np.log(spec[k - 1: k + 2])
    d = 0.5 * (a - c) / (a - 2 * b + c)  # parabolic peak on the log spectrum
    return (k + d) * 16000 / x.size, math.sqrt(2 * np.mean(x * x))


def crc(data, poly, bits):
    """FLAC's CRC-8 (poly 0x07) or CRC-16 (poly 0x8005): MSB first, initial value 0."""
    r, top, mask = 0, 1 << (bits - 1), (1 << bits) - 1
    for byte in data:
        r ^= byte << (bits - 8)
        for _ in range(8):
            r = ((r << 1) ^ poly if r & top else r << 1) & mask
    return r


def flac_verbatim(frames, rate):
    """A FLAC stream of int16 frames [n][channels], each block stored VERBATIM (the format allows
    it; no encoder is needed), after the FLAC format specification."""
    n, ch = frames.shape
    bs = 4096
    info = (bs << 128 + 16 + 24 + 24 + 20 + 3 + 5 + 36) | (bs << 128 + 24 + 24 + 20 + 3 + 5 + 36) \
        | (rate << 128 + 5 + 36 + 3) | ((ch - 1) << 128 + 36 + 5) | (15 << 128 + 36) | (n << 128)
    out = bytearray(b"fLaC" + bytes([0x80, 0, 0, 34]) + info.to_bytes(34, "big"))
    for i, at in enumerate(range(0, n, bs)):
        blk = frames[at: at + bs]
        assert i < 128  # the frame number's UTF-8-like code is then one byte
        hdr = bytes([0xFF, 0xF8, 0x70, ((ch - 1) << 4) | 0x08, i]) + (len(blk) - 1).to_bytes(2, "big")
        hdr += bytes([crc(hdr, 0x07, 8)])
        body = b"".join(b"\x02" + blk[:, c].astype(">i2").tobytes() for c in range(ch))  # VERBATIM
        frame = hdr + body
        out += frame + crc(frame, 0x8005, 16).to_bytes(2, "big")
    return bytes(out)


def decoded(lib, path):
    a = Audio()
    st = lib.sg_audio_decode_file(str(path).encode(), ctypes.byref(a))
    assert st == 0, lib.sg_last_error().decode()
    try:
        return np.ctypeslib.as_array(a.samples, shape=(a.n,)).copy(), a.src_rate, a.src_channels
    finally:
        lib.sg_audio_free(ctypes.byref(a))


def check_tone(x, seconds, freq, amp):
    assert abs(len(x) - 16000 * seconds) <= 16, len(x)
    f, a = tone(x)
    assert abs(f - freq) < 1.0, f
    assert abs(a - amp) < 0.01 * amp + 0.002, a


def test_decodes_a_44100_hz_stereo_int16_wav_to_16k_mono(lib, tmp_path):
    """Left a 1 kHz sine of 0.6, right a 1 kHz sine of 0.2 in phase: the mono mean is 0.4 at
    1 kHz (a left-only or summed mix gives 0.6 or 0.8; a wrong rate moves the frequency)."""
    l, r = sine(44100, 2.0, 1000.0, 0.6), sine(44100, 2.0, 1000.0, 0.2)
    p = tmp_path / "stereo.wav"
    write_wav_int16(p, np.stack([l, r], axis=1), 44100)
    x, rate, ch = decoded(lib, p)
    assert (rate, ch) == (44100, 2)
    check_tone(x, 2.0, 1000.0, 0.4)


def test_decodes_an_8000_hz_mono_float_wav_to_16k(lib, tmp_path):
    p = tmp_path / "mono8k.wav"
    write_wav_float(p, sine(8000, 1.5, 440.0, 0.5), 8000)
    x, rate, ch = decoded(lib, p)
    assert (rate, ch) == (8000, 1)
    check_tone(x, 1.5, 440.0, 0.5)


def test_decodes_a_16000_hz_wav_unchanged(lib, tmp_path):
    s = sine(16000, 1.0, 300.0, 0.5)
    p = tmp_path / "mono16k.wav"
    write_wav_float(p, s, 16000)
    x, _, _ = decoded(lib, p)
    assert np.array_equal(x, s.astype(np.float32))


def test_decodes_flac_from_memory_as_from_a_file(lib, tmp_path):
    """Three channels at 22.05 kHz, 700 Hz sines of 0.3, 0.5 and 0.7: the mean is 0.5."""
    chans = [sine(22050, 1.0, 700.0, a) for a in (0.3, 0.5, 0.7)]
    pcm = np.round(np.stack(chans, axis=1) * 32767).astype(np.int16)
    p = tmp_path / "tone.flac"
    p.write_bytes(flac_verbatim(pcm, 22050))
    x, rate, ch = decoded(lib, p)
    assert (rate, ch) == (22050, 3)
    check_tone(x, 1.0, 700.0, 0.5)
    raw = p.read_bytes()
    a = Audio()
    assert lib.sg_audio_decode_memory(raw, len(raw), ctypes.byref(a)) == 0, lib.sg_last_error()
    assert np.array_equal(np.ctypeslib.as_array(a.samples, shape=(a.n,)), x)
    lib.sg_audio_free(ctypes.byref(a))


def test_raw_pcm16_stereo_at_48k(lib):
    l, r = sine(48000, 1.0, 2000.0, 0.5), sine(48000, 1.0, 2000.0, 0.1)
    raw = np.clip(np.round(np.stack([l, r], 1) * 32767), -32768, 32767).astype("<i2").tobytes()
    a = Audio()
    assert lib.sg_audio_from_pcm16(raw, len(raw), 48000, 2, ctypes.byref(a)) == 0, lib.sg_last_error()
    x = np.ctypeslib.as_array(a.samples, shape=(a.n,)).copy()
    lib.sg_audio_free(ctypes.byref(a))
    check_tone(x, 1.0, 2000.0, 0.3)


def test_raw_pcm16_refuses_truncated_and_empty_input(lib):
    a = Audio()
    assert lib.sg_audio_from_pcm16(b"\0\0\0", 3, 16000, 1, ctypes.byref(a)) != 0
    assert b"truncated" in lib.sg_last_error()
    assert lib.sg_audio_from_pcm16(b"\0\0", 2, 16000, 2, ctypes.byref(a)) != 0
    assert b"truncated" in lib.sg_last_error()
    assert lib.sg_audio_from_pcm16(b"", 0, 16000, 1, ctypes.byref(a)) != 0
    assert b"empty" in lib.sg_last_error()
    assert lib.sg_audio_from_pcm16(b"\0\0", 2, 0, 1, ctypes.byref(a)) != 0
    assert b"rate" in lib.sg_last_error()


def refuses(lib, tmp_path, data, word):
    p = tmp_path / "bad.wav"
    p.write_bytes(data)
    a = Audio()
    assert lib.sg_audio_decode_file(str(p).encode(), ctypes.byref(a)) != 0
    msg = lib.sg_last_error()
    assert word in msg, msg
    assert not a.samples and a.n == 0
    assert lib.sg_audio_decode_memory(data, len(data), ctypes.byref(a)) != 0
    assert not a.samples and a.n == 0
    return msg


def test_refuses_random_bytes(lib, tmp_path):
    refuses(lib, tmp_path, np.random.default_rng(1).integers(0, 256, 5000, dtype=np.uint8).tobytes(), b"not audio")


def test_refuses_an_empty_file(lib, tmp_path):
    refuses(lib, tmp_path, b"", b"empty")


def test_refuses_a_truncated_wav_header(lib, tmp_path):
    p = tmp_path / "ok.wav"
    write_wav_int16(p, sine(16000, 0.5, 440.0, 0.5)[:, None], 16000)
    refuses(lib, tmp_path, p.read_bytes()[:30], b"not audio")


def test_refuses_a_wav_without_samples(lib, tmp_path):
    p = tmp_path / "none.wav"
    write_wav_int16(p, np.zeros((0, 1)), 16000)
    refuses(lib, tmp_path, p.read_bytes(), b"no audio samples")


def test_a_missing_file_is_an_io_error(lib, tmp_path):
    a = Audio()
    assert lib.sg_audio_decode_file(str(tmp_path / "absent.wav").encode(), ctypes.byref(a)) == 2  # SG_ERR_IO
    assert b"cannot open" in lib.sg_last_error()
