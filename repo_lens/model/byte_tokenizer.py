"""Byte-level tokenizer (the learned-increments post): ids 0..255 are the UTF-8 bytes, 256 separates documents."""

from __future__ import annotations

from repo_lens.validation import utf8_bytes


class ByteTokenizer:
    """Tokens are UTF-8 bytes; ``offsets`` map each byte to the character span it belongs to.

    Example:
        >>> tok = ByteTokenizer()
        >>> tok.encode("hé")
        [104, 195, 169]
        >>> tok.display_tokens(tok.encode("hé\\n"))
        ['h', 'é', '·', '↵']
        >>> tok.offsets("hé")
        [(0, 1), (1, 2), (1, 2)]
    """

    vocab_size = 257
    separator_id = 256
    name = "bytes"

    def encode(self, text: str) -> list[int]:
        """The UTF-8 bytes of ``text``; a lone surrogate is an InputError naming its position."""
        return list(utf8_bytes(text))

    def decode(self, ids) -> str:
        return bytes(int(i) for i in ids if int(i) < 256).decode("utf-8", errors="replace")

    def offsets(self, text: str) -> list[tuple[int, int]]:
        """(start, end) character offsets of every byte of ``text``'s UTF-8 encoding."""
        utf8_bytes(text)
        spans: list[tuple[int, int]] = []
        for index, char in enumerate(text):
            spans.extend([(index, index + 1)] * len(char.encode("utf-8")))
        return spans

    def display_tokens(self, ids) -> list[str]:
        """Readable form: a multi-byte character shows on its first byte, continuation bytes as '·'."""
        ids = [int(i) for i in ids]
        shown: list[str] = []
        index = 0
        while index < len(ids):
            token = ids[index]
            if token == self.separator_id:
                shown.append("<sep>")
                index += 1
                continue
            width = _utf8_width(token)
            chunk = bytes(ids[index:index + width]) if all(t < 256 for t in ids[index:index + width]) else b""
            try:
                char = chunk.decode("utf-8") if width > 1 and len(chunk) == width else None
            except UnicodeDecodeError:
                char = None
            if char is not None:
                shown.append(char)
                shown.extend(["·"] * (width - 1))
                index += width
                continue
            shown.append(_show_byte(token))
            index += 1
        return shown


def _utf8_width(lead: int) -> int:
    if lead >= 0xF0:
        return 4
    if lead >= 0xE0:
        return 3
    if lead >= 0xC0:
        return 2
    return 1


def _show_byte(token: int) -> str:
    if token == 0x0A:
        return "↵"
    if token == 0x20:
        return "␣"
    if 0x20 < token < 0x7F:
        return chr(token)
    return f"<{token:02x}>"
