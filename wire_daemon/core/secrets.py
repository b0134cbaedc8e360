"""What a secret looks like, so that no output shows one and no reference holds one.

The daemon never needs a secret's value: the cloud SDKs read their
credentials themselves, and the workers fetch the pool token by reference.
The only secrets a config may hold are the inline opt-ins
(``cloud.worker.token``, ``cloud.worker.admin_key``). Everything that prints
(``check-config``, error lines, the log) goes through this module:

* ``scrub`` replaces secret-shaped words in free text (an SDK's error that
  echoes a request body or header, a log line);
* ``redact`` blanks secret-named keys and secret-shaped values in a mapping;
* ``shown`` is how an error message quotes a config value: bounded, and
  hidden when it looks like a secret;
* ``looks_like_secret`` tells a pasted token from a reference (a parameter
  name, a path, an ARN, a URL), which has structure a random token lacks.
"""

from __future__ import annotations

import collections
import logging
import math
import re
from typing import Any

REDACTED = "<redacted>"
HIDDEN = "a value that looks like a secret (not shown)"

_JWT = r"eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*"  # HTCondor IDTOKENs are JWTs
_FERNET = r"gAAAAA[A-Za-z0-9_=-]{40,}"  # Keystone (fernet) tokens
_AWS_KEY_ID = r"(?:AKIA|ASIA)[A-Z0-9]{16}"
_SHAPED = re.compile(rf"^(?:{_JWT}|{_FERNET}|{_AWS_KEY_ID})$")
# One word of a base64 / base64url alphabet, long enough to be a key: a reference has ':' or
# a leading '/' (ARN, URL, path) or reads as words, which the entropy test below tells apart.
_BLOB = re.compile(r"^[A-Za-z0-9+/=_.~-]{32,}$")
_MIN_BITS_PER_CHAR = 4.0  # random base64 of 32+ characters has about 4.5 or more; names and words stay below

_SECRET_KEY = re.compile(
    r"(?i)(?:^|_)(?:token|password|passwd|secret|secret_access_key|session_token|admin_key|private_key|api_key)$"
)
_TEXT_PATTERNS = (
    # AWS access key ids, and the blob AWS appends to UnauthorizedOperation.
    (re.compile(rf"\b{_AWS_KEY_ID}\b"), "<access-key-id>"),
    (
        re.compile(r"(?i)encoded authorization failure message:\s*\S+"),
        "encoded authorization failure message: <omitted>",
    ),
    (re.compile(rf"\b{_JWT}"), "<token>"),
    (re.compile(rf"\b{_FERNET}"), "<token>"),
)
# key=value, "key": "value" and Header: value pairs whose key names a secret (password,
# X-Auth-Token, application_credential_secret, aws_secret_access_key, ...); a colon must be
# quoted or followed by a space, so that an ARN (arn:aws:secretsmanager:...) stays whole.
_MENTION = re.compile(r"(?i)password|passwd|secret|token|credential")
_KEY_VALUE = re.compile(  # a key starts after no key character: one try per key, not per character of it
    r"(?<![\w-])([\w-]{1,128})((?:\s*=\s*|[\"']\s*:\s*|\s*:\s+)[\"']?)[^\s\"',}]+"
)
_WORD = re.compile(r"[A-Za-z0-9+/=_.~-]{32,}")


def looks_like_secret(value: object) -> bool:
    """A token, a key or a password rather than a name, a path, a URL or an ARN."""
    if not isinstance(value, str):
        return False
    text = value.strip()
    if _SHAPED.match(text):
        return True
    if not _BLOB.match(text) or text.startswith(("/", ".")):
        return False
    classes = sum(any(test(c) for c in text) for test in (str.isupper, str.islower, str.isdigit))
    return classes == 3 and _bits_per_char(text) >= _MIN_BITS_PER_CHAR


def _bits_per_char(text: str) -> float:
    counts = collections.Counter(text)
    return -sum(n / len(text) * math.log2(n / len(text)) for n in counts.values())


def scrub(text: str) -> str:
    """``text`` with every secret-shaped part replaced: for lines that quote what someone else wrote."""
    for pattern, replacement in _TEXT_PATTERNS:
        text = pattern.sub(replacement, text)
    if _MENTION.search(text):  # the pair pattern is the costly one: only where a key may name a secret
        text = _KEY_VALUE.sub(_blank_value, text)
    return _WORD.sub(lambda m: REDACTED if looks_like_secret(m.group(0)) else m.group(0), text)


def _blank_value(match: re.Match[str]) -> str:
    key, separator = match.group(1), match.group(2)
    if key.endswith(("Error", "Exception")):  # an exception's name before its message ("NoCredentialsError: ...")
        return match.group(0)
    return f"{key}{separator}{REDACTED}" if _MENTION.search(key) else match.group(0)


def shown(value: object, limit: int = 60) -> str:
    """A config value as an error message quotes it: its repr, cut short, or not at all if it looks secret."""
    text = repr(value)[: 4 * limit]  # what is shown, and some: a huge value costs no more to check
    if looks_like_secret(value) or scrub(text) != text:  # a secret alone, or inside a list or a mapping
        return HIDDEN
    return text if len(text) <= limit else text[: limit - 3] + "..."


def redact(data: Any) -> Any:
    """A copy of a mapping (lists, nested mappings) with secret-named keys and secret-shaped values blanked."""
    if isinstance(data, dict):
        return {k: REDACTED if _secret_key(k, v) else redact(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [redact(v) for v in data]
    return REDACTED if looks_like_secret(data) else data


def _secret_key(key: object, value: object) -> bool:
    return isinstance(key, str) and bool(_SECRET_KEY.search(key)) and value not in ("", None)


class ScrubSecrets(logging.Filter):
    """A log filter: whatever a record says (an SDK's debug line, an exception's text) leaves scrubbed."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = scrub(message)
        if clean != message:
            record.msg, record.args = clean, ()
        if record.exc_info and not record.exc_text:
            record.exc_text = scrub(logging.Formatter().formatException(record.exc_info))
        elif record.exc_text:
            record.exc_text = scrub(record.exc_text)
        return True
