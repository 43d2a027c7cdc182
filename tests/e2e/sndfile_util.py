"""Reading audio back in the tests: the system's libsndfile through ctypes (it reads WAV, FLAC,
MP3 and Ogg Opus), so no Python audio package is needed."""
import ctypes
import ctypes.util
import os
import tempfile

import numpy as np


class SF_INFO(ctypes.Structure):
    _fields_ = [("frames", ctypes.c_int64), ("samplerate", ctypes.c_int), ("channels", ctypes.c_int),
                ("format", ctypes.c_int), ("sections", ctypes.c_int), ("seekable", ctypes.c_int)]


_lib = ctypes.CDLL(ctypes.util.find_library("sndfile") or "libsndfile.so.1")
_lib.sf_open.restype = ctypes.c_void_p
_lib.sf_open.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(SF_INFO)]
_lib.sf_readf_float.restype = ctypes.c_int64
_lib.sf_readf_float.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_float), ctypes.c_int64]
_lib.sf_close.argtypes = [ctypes.c_void_p]
_lib.sf_strerror.restype = ctypes.c_char_p
_lib.sf_strerror.argtypes = [ctypes.c_void_p]
SFM_READ = 0x10


def decode(data: bytes, suffix=".bin"):
    """(samples as float32 mono, sample rate) of encoded audio bytes."""
    fd, path = tempfile.mkstemp(suffix=suffix)
    try:
        os.write(fd, data)
        os.close(fd)
        info = SF_INFO()
        f = _lib.sf_open(path.encode(), SFM_READ, ctypes.byref(info))
        if not f:
            raise ValueError("libsndfile cannot read it: " + _lib.sf_strerror(None).decode())
        out = []
        buf = (ctypes.c_float * (4096 * info.channels))()
        while True:
            n = _lib.sf_readf_float(f, buf, 4096)
            if n <= 0:
                break
            out.append(np.frombuffer(buf, dtype=np.float32, count=n * info.channels).copy())
        _lib.sf_close(f)
        x = np.concatenate(out) if out else np.zeros(0, np.float32)
        return x.reshape(-1, info.channels).mean(axis=1), info.samplerate
    finally:
        if os.path.exists(path):
            os.unlink(path)


def pcm16(data: bytes):
    """Raw s16le bytes as float32."""
    return np.frombuffer(data, dtype="<i2").astype(np.float32) / 32768.0
