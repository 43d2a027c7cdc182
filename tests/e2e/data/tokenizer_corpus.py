#!/usr/bin/env python3
"""The tokenizer parity corpus, generated deterministically (no file to drift).

    tests/e2e/data/tokenizer_corpus.py [OUT.json]     writes (or prints) the JSON list

corpus() returns at least 2,000 strings: sentences in many scripts, code, emoji with ZWJ
sequences, flags and skin tones, whitespace runs of every kind, digits in several systems,
special tokens of the real tokenizers embedded in text, unusual but valid UTF-8 (controls,
combining marks, noncharacters, private use, astral planes, BOM, bidi marks) and very long words.
"""
import json
import random
import sys

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Hello, world! How's it going? I'm fine, you'll see; they'd've known.",
    "Don't DON'T don’t it's IT'S we're WE'RE they've I'll I'd",
    "Le cœur a ses raisons que la raison ne connaît point.",
    "Größenwahn über Äpfel, Öl und Übermut: straße STRASSE ß ẞ",
    "¿Dónde está la biblioteca? ¡Olé! Mañana será otro día.",
    "Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "Τάχιστη αλώπηξ βαφής ψημένη γη, δρασκελίζει υπέρ νωθρού κυνός. ΣΊΣΥΦΟΣ σοφός",
    "العربية لغة جميلة، وهي لغة القرآن الكريم. ١٢٣٤٥٦٧٨٩٠",
    "עברית היא שפה שמית. שָׁלוֹם עֲלֵיכֶם",
    "हिन्दी भारत की राजभाषा है। क्षत्रिय ज्ञान श्री",
    "বাংলা ভাষা আমার মায়ের ভাষা।",
    "ภาษาไทยไม่มีการเว้นวรรคระหว่างคำ สวัสดีครับ",
    "我爱北京天安门，天安门上太阳升。中华人民共和国成立于1949年。",
    "日本語の文章には漢字、ひらがな、カタカナが混在します。ｶﾀｶﾅ半角",
    "한국어는 한글로 씁니다. 안녕하세요! 반갑습니다.",
    "Tiếng Việt có nhiều dấu thanh: à á ả ã ạ ầ ấ ẩ ẫ ậ.",
    "İstanbul'da ıslak ılık İĞNE iğne; DİYARBAKIR ışık",
    "Zażółć gęślą jaźń. Pchnąć w tę łódź jeża lub ośm skrzyń fig.",
    "ქართული ენა ძალიან ლამაზია.",
    "Հայերենը հնդեվրոպական լեզու է։",
    "አማርኛ የኢትዮጵያ ቋንቋ ነው።",
    "தமிழ் ஒரு செம்மொழி ஆகும்.",
    "Ελληνικά: ά έ ή ί ό ύ ώ ΐ ΰ",
    "Íslenska: Þórður, Æsir, Ðiðrik.",
    "Naïve café résumé coöperate façade jalapeño piñata",
    "ǅungla ǈudi ǋuna Ǳ ǲ ǳ ﬁ ﬂ ﬀ ﬃ ﬄ ﬅ ﬆ",
    "Ⅻ ⅻ ½ ¼ ¾ ² ³ ¹ ⁴ ₅ ℃ ℉ № ™ ℮ Å K",
    "mathematical 𝐀𝐁𝐂 𝔄𝔅ℭ 𝕏𝕐ℤ 𝟘𝟙𝟚",
    "Mongolian ᠮᠣᠩᠭᠣᠯ and Tibetan བོད་ཡིག and Khmer ភាសាខ្មែរ",
    "Cherokee ᏣᎳᎩ and Canadian syllabics ᐃᓄᒃᑎᑐᑦ",
    "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor.",
    "E = mc² and ∑ᵢ xᵢ² ≤ ∫₀^∞ f(x) dx ≈ 3.14159…",
    "Prices: $1,234.56 — €99,99 — £0.5 — ¥10000 — ₹2,50,000 — ₿0.0001",
    "Email me at john.doe+tag@example.co.uk or visit https://example.com/path?q=1&r=2#frag",
    "C:\\Users\\name\\Documents\\file (1).txt and /usr/local/bin/python3.11",
]

CODE = [
    "def f(x):\n    return x ** 2  # square\n\nprint(f(3))\n",
    "int main(void) {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}\n",
    "for (let i = 0; i < n; i++) { arr[i] = arr[i-1] + 1; }",
    '{"key": "value", "list": [1, 2.5, -3e10, true, null], "nested": {"a": {}}}',
    "<html>\n  <body class=\"main\">\n    <p>Hi &amp; bye</p>\n  </body>\n</html>",
    "SELECT id, name FROM users WHERE age >= 21 ORDER BY name DESC LIMIT 10;",
    "#!/bin/bash\nset -euo pipefail\nfor f in *.txt; do echo \"$f\"; done\n",
    "    \n        indented\n\t\tmixed\t \ttabs\n",
    "fn main() -> Result<(), Box<dyn Error>> { let v: Vec<u8> = vec![0; 16]; Ok(()) }",
    "x = [i*i for i in range(100) if i % 3 == 0]  # list comprehension",
    "if (a && b || !c) { x <<= 2; y >>= 1; z ^= 0xFF; } else if (a != b) {}",
    "```python\nimport numpy as np\narr = np.zeros((3, 4), dtype=np.float32)\n```",
    "a==b!=c<=d>=e->f=>g::h...i??j||k&&l",
    "@decorator\nclass Foo(Bar, metaclass=Meta):\n    __slots__ = ('a', 'b')\n",
    "  // comment\n  /* block */\n  /** doc */",
    "diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1,3 +1,4 @@\n-old\n+new\n",
]

EMOJI = [
    "👋🌍", "😀😃😄😁", "👨‍👩‍👧‍👦", "👩🏽‍💻", "🏳️‍🌈", "🏴‍☠️", "🇫🇷🇯🇵🇺🇸🇧🇷", "👍🏻👍🏼👍🏽👍🏾👍🏿",
    "❤️", "☺︎", "1️⃣2️⃣#️⃣*️⃣", "🧑‍🤝‍🧑", "👁️‍🗨️", "🫠🫶🪿", "🏴󠁧󠁢󠁳󠁣󠁴󠁿", "🐈‍⬛", "😶‍🌫️", "❤️‍🔥",
    "🤷‍♀️🤷‍♂️", "🇺🇳", "⌚⌛⏰", "🀄🃏",
]

WHITESPACE = [
    " ", "  ", "   ", "    ", "        ", "\t", "\t\t", "\n", "\n\n", "\n\n\n", "\r\n", "\r\n\r\n", " \n ", "\n \n",
    " \t \t ", "\u00a0", "\u00a0\u00a0", "\u3000", "\u2028", "\u2029", "\u0085", "\u180e", "\u200b", "\u2003\u2002",
    "\u202f", "\u205f", "\u1680", "\x0b", "\x0c", " \r ", "\n\t\n", "      \n      ",
]

DIGITS = [
    "0", "7", "42", "123", "1234", "12345", "123456789012345678901234567890", "3.14159", "-0.001", "1e-10",
    "1,000,000", "2024-01-31", "12:34:56", "٠١٢٣٤٥٦٧٨٩", "۰۱۲۳۴۵۶۷۸۹", "０１２３４５６７８９", "१२३४५",
    "①②③", "Ⅳ", "½", "²³", "0x1F", "0b1010", "v1.2.3-rc4", "+33 6 12 34 56 78", "9999999999999999",
]

SPECIALS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|extra_0|>", "<|extra_204|>", "<think>", "</think>",
    "<tool_call>", "</tool_call>", "<|vision_start|>", "[CLS]", "[SEP]", "[MASK]", "[PAD]", "[UNK]",
    "<bos>", "<eos>", "<pad>", "<unk>", "<mask>", "<start_of_turn>", "<end_of_turn>", "<start_of_image>",
    "[multimodal]", "<|im_start", "im_end|>", "<|endoftext", "<<|im_end|>>", "<s>", "</s>",
]

UNUSUAL = [
    "\x00", "a\x00b", "\x01\x02\x03\x1f", "\x7f", "\u0080\u009f", "\ufeffBOM at start", "\u200e\u200f\u202a\u202e",
    "\u200d", "\u200c", "e\u0301", "\u00e9", "a\u0300\u0301\u0302\u0303\u0304\u0305\u0306\u0307",
    "Z̴̡̢̛̛̖̙̗͕̗̝̤̥͚̫̪̪͔̰̗̤͖̱̤͚̘̙̟̘̖̰̙̝̘̿̽̌̔͊̈̽̀̓̀̔̍͆̀̋̀̒̏̌̈̃̏̌̉͊́̒̿̍͋̕̕͝͝a̶l̸g̷o̶", "\ufffd", "\ufffe\uffff",
    "\U0010fffd", "\ue000\uf8ff", "\U000f0000", "\U0001f600", "\U00020000\U0002a6d6", "\U0001d11e",
    "\u1100\u1161\u11a8", "\uac01", "\u0041\u030a", "\u212b", "\ufb01", "\u2126", "\u0130\u0131", "\u03a3\u03c2",
    "\ufe0f", "\U000e0041", "\u034f", "\u2060", "\u0600\u06dd", "\U000e0001", "\u1d00\u1d01",
]

LONG = [
    "a" * 1000, "ab" * 400, "x" * 300 + "y" * 300, "supercalifragilisticexpialidocious" * 20,
    "Donaudampfschifffahrtselektrizitätenhauptbetriebswerkbauunterbeamtengesellschaft",
    "pneumonoultramicroscopicsilicovolcanoconiosis" * 5, "0123456789" * 50, "!" * 200, "-" * 120, "=" * 80,
    "你好" * 200, "🙂" * 100, "é" * 300, "e\u0301" * 200, "ÿ" * 100, "\t" * 50, " " * 300, "\n" * 100,
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!",
    "QmFzZTY0IGVuY29kZWQgc3RyaW5nIHdpdGggbG90cyBvZiBjaGFyYWN0ZXJzIGFuZCBubyBzcGFjZXMgYXQgYWxs" * 3,
    "deadbeefcafebabe" * 30, "https://example.com/" + "very-long-path-segment/" * 20,
]

RANGES = [(0x20, 0x7E), (0xA0, 0x24F), (0x370, 0x3FF), (0x400, 0x4FF), (0x590, 0x5FF), (0x600, 0x6FF),
          (0x900, 0x97F), (0xE00, 0xE7F), (0x1100, 0x11FF), (0x3040, 0x30FF), (0x4E00, 0x9FFF), (0xAC00, 0xD7A3),
          (0x1F300, 0x1F64F), (0x2000, 0x206F), (0x300, 0x36F), (0xFF00, 0xFFEF), (0x1D400, 0x1D7FF), (0x0, 0x1F)]


def rand_chars(rng, n):
    out = []
    for _ in range(n):
        lo, hi = rng.choice(RANGES)
        c = rng.randint(lo, hi)
        if 0xD800 <= c <= 0xDFFF:
            c = 0x41
        out.append(chr(c))
    return "".join(out)


def corpus():
    rng = random.Random(20260521)
    pools = [SENTENCES, CODE, EMOJI, WHITESPACE, DIGITS, SPECIALS, UNUSUAL, LONG]
    out = []
    for pool in pools:
        out.extend(pool)
    for s in SENTENCES:
        out += [s.lower(), s.upper(), " " + s, s + " ", s.replace(" ", "  "), s.replace(" ", "\n")]
    for sp in SPECIALS:
        out += [f"Hello {sp} world", f"{sp}{sp}", f" {sp} ", f"x{sp}y", f"{sp}\n", f"\n\n{sp}  text"]
    for ws in WHITESPACE:
        out += [f"a{ws}b", f"{ws}word", f"word{ws}", f"1{ws}2", f"{ws}{ws}x"]
    for d in DIGITS:
        out += [f"abc{d}def", f"{d} {d}", f"#{d}"]
    small = SENTENCES + CODE + EMOJI + WHITESPACE + DIGITS + SPECIALS + UNUSUAL
    while len(out) < 1700:
        k = rng.randint(1, 6)
        parts = [rng.choice(small) for _ in range(k)]
        sep = rng.choice(["", " ", "\n", "  ", "\t"])
        out.append(sep.join(parts))
    while len(out) < 2100:
        out.append(rand_chars(rng, rng.randint(1, 40)))
    while len(out) < 2200:
        w = "".join(rng.choice("abcdefghijklmnopqrstuvwxyzäöüß") for _ in range(rng.randint(100, 400)))
        out.append(w)
    return out


if __name__ == "__main__":
    data = json.dumps(corpus(), ensure_ascii=False)
    if len(sys.argv) > 1:
        open(sys.argv[1], "w", encoding="utf-8").write(data)
    else:
        print(data)
