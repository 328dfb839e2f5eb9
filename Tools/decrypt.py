#!/usr/bin/env python3
"""An independent Locker decryptor, written from docs/format.md alone.

    decrypt.py --device DIR --store DIR (--passcode-file FILE | --no-passcode) PATH
    decrypt.py --device DIR --store DIR --list

Reads the raw device directory and store, checks every seal, MAC and key
wrap the format defines, and writes the plaintext of the object at PATH to
standard output (or, with --list, every object path and its class). Any
authentication or format failure exits 1 with a message on standard error.
It never writes to the device or the store (so it keeps no attempt counter).

Needs Python 3 and the `cryptography` and `lz4` packages (on Debian:
python3-cryptography and python3-lz4; see Tools/setup.sh).
"""
import argparse
import base64
import hashlib
import hmac
import io
import os
import stat
import struct
import sys

import lz4.block
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.kdf.scrypt import Scrypt
from cryptography.hazmat.primitives.keywrap import InvalidUnwrap, aes_key_unwrap
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

ROOT_PARENT_ID = bytes(16)
CLASS_NAMES = {1: "complete", 2: "completeUnlessOpen", 3: "completeUntilFirstUserAuthentication", 4: "none"}
LETTERS = {1: b"A", 2: b"B", 3: b"C", 4: b"D"}
CHUNK_SIZES = {1 << k for k in range(14, 23)}


class Refused(Exception):
    """The input does not authenticate, or breaks a rule of the format."""


# Primitives (format.md, "Conventions used in this document")

def hkdf(ikm, salt, info):
    return HKDF(hashes.SHA256(), 32, salt or None, info).derive(ikm)  # empty salt = no salt


def mac(key, message):
    return hmac.new(key, message, hashlib.sha256).digest()


def gcm_open(key, nonce, sealed, aad, what):
    try:
        return AESGCM(key).decrypt(nonce, sealed, aad)
    except InvalidTag:
        raise Refused(f"{what} does not authenticate") from None


def kw_unwrap(kek, wrapped, what):
    try:
        return aes_key_unwrap(kek, wrapped)
    except InvalidUnwrap:
        raise Refused(f"{what}: key unwrap failed") from None


def b64(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def b64_decode(text):
    """Canonical unpadded base64url, or None."""
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    if len(text) % 4 == 1 or any(c not in alphabet for c in text):
        return None
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    return raw if b64(raw) == text else None  # no non-zero trailing bits


def read_limited(path, limit, what):
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except FileNotFoundError:
        raise Refused(f"{what} is missing ({path})") from None
    if len(data) > limit:
        raise Refused(f"{what} is larger than {limit} bytes")
    return data


class Reader:
    """A big-endian cursor over an authenticated body."""

    def __init__(self, data, what):
        self.data, self.pos, self.what = data, 0, what

    def take(self, n):
        if self.pos + n > len(self.data):
            raise Refused(f"{self.what} is truncated")
        self.pos += n
        return self.data[self.pos - n:self.pos]

    def int(self, n):
        return int.from_bytes(self.take(n), "big")

    def string(self, limit):
        raw = self.take(self.int(2))
        if len(raw) > limit:
            raise Refused(f"{self.what}: string longer than {limit} bytes")
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise Refused(f"{self.what}: string is not UTF-8") from None

    def remaining(self):
        return len(self.data) - self.pos

    def end(self):
        if self.pos != len(self.data):
            raise Refused(f"{self.what} has trailing bytes")


# Device (format.md, "Device directory" to "Generations and rollback")

class Device:
    def __init__(self, directory, passcode):
        self.passcode = passcode  # bytes, or None for --no-passcode / --list
        self._passcode_key = None
        uid = read_limited(os.path.join(directory, "uid"), 64 << 10, "uid")
        if len(uid) != 32:
            raise Refused("uid is not 32 bytes")

        def device_key(ikm, info):
            return hkdf(ikm, b"locker v1", info)

        self.class_d_kek = device_key(uid, b"class D kek")
        self.tangle = device_key(uid, b"passcode tangle")
        record_generation = self._check_record(directory, device_key(uid, b"device record mac"))
        effaceable = read_limited(os.path.join(directory, "effaceable"), 64 << 10, "effaceable key")
        if len(effaceable) != 32:
            raise Refused("effaceable key is not 32 bytes")
        self.metadata_key = device_key(uid + effaceable, b"metadata")
        self._open_keybag(directory, device_key(uid + effaceable, b"keybag seal"))
        if self.generation < record_generation:
            raise Refused("the keybag is older than the device record (rollback)")
        if self.generation > record_generation + 1:
            raise Refused("the keybag is more than one generation ahead of the device record")
        # generation == record + 1 is an interrupted rewrite; the keybag is authentic and current.

    @staticmethod
    def _check_record(directory, mac_key):
        record = read_limited(os.path.join(directory, "record"), 64 << 10, "device record")
        if len(record) != 93 or not hmac.compare_digest(mac(mac_key, record[:61]), record[61:]):
            raise Refused("device record does not authenticate")
        if record[:8] != b"LKDR\x00\x01\x00\x00" or record[60] > 1:
            raise Refused("device record: bad magic, version, reserved or wiped field")
        if record[60] == 1:
            raise Refused("the device is wiped")
        return int.from_bytes(record[52:60], "big")

    def _open_keybag(self, directory, seal_key):
        data = read_limited(os.path.join(directory, "keybag"), 64 << 10, "keybag")
        if data[:8] != b"LKKB\x00\x01\x00\x00":
            raise Refused("keybag: bad magic, version or reserved field")
        if not 16 <= len(data) - 20 <= 4096:
            raise Refused("keybag: bad sealed length")
        r = Reader(gcm_open(seal_key, data[8:20], data[20:], data[:8], "keybag"), "keybag")
        r.take(16)  # uuid
        self.generation, class_generation = r.int(8), r.int(4)
        flag, kdf_id, self.log_n, self.r, self.p = r.int(1), r.int(1), r.int(1), r.int(4), r.int(4)
        self.salt = r.take(r.int(1))
        grace, erase_after, default_class = r.int(4), r.int(1), r.int(1)
        self.entries = []
        for _ in range(r.int(1)):
            cls, wrap_type, key_id, key_generation = r.int(1), r.int(1), r.take(16), r.int(4)
            wrapped = r.take(r.int(1))
            self.entries.append((cls, wrap_type, key_id, key_generation, wrapped, r.take(r.int(1))))
        r.end()
        ok = (flag <= 1 and kdf_id == 1 and default_class in CLASS_NAMES
              and 10 <= self.log_n <= 22 and 1 <= self.r <= 32 and 1 <= self.p <= 16
              and 128 * self.r * ((1 << self.log_n) + self.p + 2) <= 1 << 30
              and len(self.salt) == 32 and grace <= 86400 and erase_after <= 100
              and [e[0] for e in self.entries] == [1, 2, 3, 4])
        for cls, wrap_type, key_id, key_generation, wrapped, public in self.entries:
            ok = ok and len(wrapped) == 40 and wrap_type == (1 if cls == 4 else 2)
            ok = ok and len(public) == (32 if cls == 2 else 0)
            ok = ok and (cls == 4 or key_generation == class_generation)
        if not ok:
            raise Refused("keybag breaks a reader rule")
        self.has_passcode = flag == 1
        self.entries = {e[0]: e for e in self.entries}

    def passcode_key(self):
        if self._passcode_key is None:
            if not self.has_passcode:
                if self.passcode is not None:
                    raise Refused("this device has no passcode: use --no-passcode")
                self._passcode_key = hkdf(self.tangle, b"", b"locker v1 no passcode")
            else:
                if self.passcode is None:
                    raise Refused("protected data unavailable: classes A, B and C need --passcode-file")
                stretched = Scrypt(self.salt, 32, 1 << self.log_n, self.r, self.p).derive(self.passcode)
                self._passcode_key = hkdf(stretched, self.tangle, b"locker v1 passcode key")
                # The passcode is right if and only if class A unwraps.
                try:
                    aes_key_unwrap(self.class_kek(1), self.entries[1][4])
                except InvalidUnwrap:
                    raise Refused("wrong passcode") from None
        return self._passcode_key

    def class_kek(self, cls):
        if cls == 4:
            return self.class_d_kek
        return hkdf(self.passcode_key(), b"", b"locker v1 class " + LETTERS[cls] + b" kek")

    def class_key(self, cls):
        key = kw_unwrap(self.class_kek(cls), self.entries[cls][4], f"keybag entry {LETTERS[cls].decode()}")
        if cls == 2:
            public = X25519PrivateKey.from_private_bytes(key).public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
            if public != self.entries[2][5]:
                raise Refused("keybag: class B scalar does not match its public key")
        return key

    def unwrap_file_key(self, cls, key_id, key_generation, blob):
        """format.md, "Wrapped file key" and "Unwrapping rules"."""
        _, _, entry_id, entry_generation, _, public = self.entries[cls]
        if key_generation < entry_generation:
            raise Refused("key reset: the object's class key was replaced")
        if not hmac.compare_digest(key_id, entry_id) or key_generation != entry_generation:
            raise Refused("wrapped file key does not belong to the keybag's class key")
        class_key = self.class_key(cls)
        if cls != 2:
            return kw_unwrap(class_key, blob, "file key")
        ephemeral = blob[:32]
        try:
            z = X25519PrivateKey.from_private_bytes(class_key).exchange(X25519PublicKey.from_public_bytes(ephemeral))
        except ValueError:  # OpenSSL refuses an all-zero result
            z = bytes(32)
        if z == bytes(32):
            raise Refused("class B: all-zero shared secret")
        kek = hashlib.sha256(b"\x00\x00\x00\x01" + z + ephemeral + public).digest()
        return kw_unwrap(kek, blob[32:], "file key")


# Store (format.md, "Objects and names")

class Store:
    def __init__(self, directory, device):
        self.dir, self.device = directory, device
        m = device.metadata_key
        self.record_key = hkdf(m, b"locker v1 metadata", b"record seal")
        self.name_key = hkdf(m, b"locker v1 metadata", b"name encryption")
        self.nonce_key = hkdf(m, b"locker v1 metadata", b"name nonce")

    def open_record(self, path, magic, what):
        return self.open_record_bytes(read_limited(path, 8192, what), magic, what)

    def open_record_bytes(self, data, magic, what):
        if data[:8] != magic + b"\x00\x01\x00\x00" or len(data) < 36:
            raise Refused(f"{what}: bad magic, version, reserved field or length")
        return Reader(gcm_open(self.record_key, data[8:20], data[20:], data[:8], what), what)

    def directory(self, fs_path, what, parent_id, name):
        """Returns (directory ID, default class) of the directory reached
        as NAME in the directory PARENT_ID; its record must vouch for that
        place (or, during a move, the place it moves from)."""
        r = self.open_record(os.path.join(fs_path, ".dir"), b"LKDI", f"directory record of {what}")
        directory_id, places = r.take(16), [(r.take(16), r.string(1024))]
        default = r.int(1)
        r.take(8)  # created
        if r.remaining():
            places.append((r.take(16), r.string(1024)))
            if places[1][1] == "":
                raise Refused(f"directory record of {what}: empty previous name")
        r.end()
        if default != 0 and default not in CLASS_NAMES:
            raise Refused(f"directory record of {what}: bad default class")
        if (parent_id, name) not in places:
            raise Refused(f"directory record of {what} belongs elsewhere")
        return directory_id, default

    def names_vouched(self, fs_path, parent_id):
        """The names a directory's record vouches for in PARENT_ID (for
        hashed names), without checking its place."""
        try:
            r = self.open_record(os.path.join(fs_path, ".dir"), b"LKDI", "directory record")
        except Refused:
            return []
        r.take(16)
        places = [(r.take(16), r.string(1024))]
        r.take(9)
        if r.remaining():
            places.append((r.take(16), r.string(1024)))
        return [n for p, n in places if p == parent_id]

    def header(self, fs_path, what):
        """An object header file: `LKOH` (data in data/<object ID>) or
        `LKOI` (the record, then the data inline)."""
        data = read_limited(fs_path, 8192 + 56 * 1024, f"header of {what}")
        inline = None
        if data[:4] == b"LKOI":
            record_length = int.from_bytes(data[6:8], "big") if len(data) >= 8 else 0
            if data[4:6] != b"\x00\x01" or not 36 <= record_length <= min(len(data), 8192):
                raise Refused(f"header of {what}: bad version or record length")
            inline = data[record_length:]
            if len(inline) > 56 * 1024:
                raise Refused(f"header of {what}: inline data too long")
            data = data[:record_length]
            r = Reader(gcm_open(self.record_key, data[8:20], data[20:], data[:8], f"header of {what}"), f"header of {what}")
        else:
            if len(data) > 8192:
                raise Refused(f"header of {what}: too long")
            r = self.open_record_bytes(data, b"LKOH", f"header of {what}")
        h = {"parent": r.take(16), "name": r.string(1024), "inline": inline}
        if r.int(1) > 2:
            raise Refused(f"header of {what}: bad protection source")
        r.string(8192)  # source directory path
        h["class"] = cls = r.int(1)
        if cls not in CLASS_NAMES:
            raise Refused(f"header of {what}: bad class")
        h["key_id"], h["key_generation"] = r.take(16), r.int(4)
        h["blob"] = r.take(72 if cls == 2 else 40)
        if any(r.take(0 if cls == 2 else 32)):
            raise Refused(f"header of {what}: non-zero padding")
        h["mac_input"] = b"locker v1 header" + r.data[r.pos:r.pos + 16 + 4 + 8 + 8 + 1 + 8]
        h["object_id"], h["chunk_size"], h["length"], h["data_length"] = r.take(16), r.int(4), r.int(8), r.int(8)
        compression = r.int(1)
        r.take(16)  # created (covered by the MAC), modified
        h["mac"] = r.take(32)
        r.end()
        n = max(1, -(-h["length"] // h["chunk_size"])) if h["chunk_size"] else 0
        low = 17 * n + 4 * n + 16
        if (h["chunk_size"] not in CHUNK_SIZES or compression != 1 or h["length"] > 1 << 48
                or not low <= h["data_length"] <= h["length"] + low):
            raise Refused(f"header of {what}: chunk size, compression or lengths out of bounds")
        if inline is not None and len(inline) != h["data_length"]:
            raise Refused(f"header of {what}: inline data length differs from the header's")
        return h

    def file_name(self, parent_id, name):
        plain = name.encode()
        nonce = mac(self.nonce_key, parent_id + plain)[:12]
        encoded = b64(nonce + AESGCM(self.name_key).encrypt(nonce, plain, parent_id))
        return encoded if len(encoded) <= 200 else "L." + b64(hashlib.sha256(encoded.encode()).digest())

    def decode_name(self, parent_id, file_name):
        """The name an entry's file name encodes, or None if it is not this store's."""
        raw = b64_decode(file_name)
        if raw is None or len(raw) < 28:
            return None
        try:
            plain = AESGCM(self.name_key).decrypt(raw[:12], raw[12:], parent_id)
            if not hmac.compare_digest(mac(self.nonce_key, parent_id + plain)[:12], raw[:12]):
                return None  # synthetic-IV check
            return plain.decode("utf-8")
        except (InvalidTag, UnicodeDecodeError):
            return None

    def entry_name(self, parent_id, fs_path, file_name, is_dir, what):
        """Authenticates an entry's name (short or `L.`) and returns it."""
        if file_name.startswith("L."):
            names = self.names_vouched(fs_path, parent_id) if is_dir else [self.header(fs_path, what)["name"]]
            for name in names:
                if self.file_name(parent_id, name) == file_name:
                    return name
            raise Refused(f"{what}: long name does not re-encode to its file name")
        name = self.decode_name(parent_id, file_name)
        if name is None:
            raise Refused(f"{what}: name does not authenticate")
        return name

    def find(self, path):
        """Walks ns/ to the object at PATH; returns its header."""
        text = path.strip()
        text = text[1:] if text.startswith("/") else text
        text = text[:-1] if text.endswith("/") else text
        parts = text.split("/") if text else []
        if not parts or any(p in ("", ".", "..") or len(p.encode()) > 1024 for p in parts):
            raise Refused(f"'{path}' is not an object path")
        fs_path = os.path.join(self.dir, "ns")
        directory_id, _ = self.directory(fs_path, "/", ROOT_PARENT_ID, "")
        for i, part in enumerate(parts):
            what = "/" + "/".join(parts[:i + 1])
            file_name = self.file_name(directory_id, part)
            fs_path = os.path.join(fs_path, file_name)
            try:
                is_dir = stat.S_ISDIR(os.lstat(fs_path).st_mode)
            except FileNotFoundError:
                raise Refused(f"{what}: not found") from None
            if self.entry_name(directory_id, fs_path, file_name, is_dir, what) != part:
                raise Refused(f"{what}: name mismatch")
            if i < len(parts) - 1:
                if not is_dir:
                    raise Refused(f"{what}: not a directory")
                directory_id = self.directory(fs_path, what, directory_id, part)[0]
            elif is_dir:
                raise Refused(f"{what}: is a directory")
        header = self.header(fs_path, path)
        if header["parent"] != directory_id or header["name"] != parts[-1]:
            raise Refused(f"header of {path} belongs elsewhere")
        return header

    def walk(self, fs_path, directory_id, prefix, damaged):
        """Yields (path, class) for every object below; notes damaged entries."""
        for file_name in sorted(os.listdir(fs_path)):
            if file_name == ".dir" or ".tmp-" in file_name:
                continue  # temporary: a new directory or an atomic replacement
            entry = os.path.join(fs_path, file_name)
            is_dir = stat.S_ISDIR(os.lstat(entry).st_mode)
            try:
                name = self.entry_name(directory_id, entry, file_name, is_dir, prefix + file_name)
                if is_dir:
                    yield from self.walk(entry, self.directory(entry, prefix + name, directory_id, name)[0], prefix + name + "/", damaged)
                    continue
                header = self.header(entry, prefix + name)
                if header["parent"] != directory_id or header["name"] != name:
                    raise Refused(f"header of {prefix + name} belongs elsewhere")
                yield prefix + name, CLASS_NAMES[header["class"]]
            except Refused as error:
                damaged.append(str(error))


def decrypt(store, header, out):
    """format.md, "Object header body" (MAC) and "Data file"."""
    h = header
    file_key = store.device.unwrap_file_key(h["class"], h["key_id"], h["key_generation"], h["blob"])
    if not hmac.compare_digest(mac(hkdf(file_key, b"", b"locker v1 header mac"), h["mac_input"]), h["mac"]):
        raise Refused("header MAC does not verify")
    aead = AESGCM(hkdf(file_key, b"", b"locker v1 chunk"))
    size, length = h["chunk_size"], h["length"]
    n = max(1, -(-length // size))

    def open_sealed(counter, flag, sealed, what):
        try:
            return aead.decrypt(counter.to_bytes(11, "big") + bytes([flag]), sealed, b"")
        except InvalidTag:
            raise Refused(f"{what} does not authenticate") from None

    inline = h["inline"]
    with (io.BytesIO(inline) if inline is not None else open(os.path.join(store.dir, "data", h["object_id"].hex()), "rb")) as f:
        if inline is None and os.fstat(f.fileno()).st_size != h["data_length"]:
            raise Refused("data file length differs from the header's")
        index_at = h["data_length"] - (4 * n + 16)
        f.seek(index_at)
        lengths = struct.unpack(f">{n}I", open_sealed(n, 2, f.read(4 * n + 16), "index"))
        chunk_lengths = [min(size, length - i * size) for i in range(n)]
        if sum(lengths) != index_at or any(not 17 <= rl <= cl + 17 for rl, cl in zip(lengths, chunk_lengths)):
            raise Refused("index: record lengths out of bounds")
        f.seek(0)
        for i, (record_length, chunk_length) in enumerate(zip(lengths, chunk_lengths)):
            record = open_sealed(i, 1 if i == n - 1 else 0, f.read(record_length), f"chunk {i}")
            mode, payload = record[0], record[1:]
            if mode == 1 and chunk_length > 0:
                try:
                    payload = lz4.block.decompress(payload, uncompressed_size=chunk_length)
                except lz4.block.LZ4BlockError:
                    raise Refused(f"chunk {i}: bad LZ4 block") from None
            elif mode != 0:
                raise Refused(f"chunk {i}: bad mode {mode}")
            if len(payload) != chunk_length:
                raise Refused(f"chunk {i}: wrong length")
            out.write(payload)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", required=True, help="the device directory (LOCKER_DEVICE)")
    parser.add_argument("--store", required=True, help="the store directory (LOCKER_STORE)")
    secret = parser.add_mutually_exclusive_group()
    secret.add_argument("--passcode-file", help="a file whose first line is the passcode")
    secret.add_argument("--no-passcode", action="store_true", help="the device has no passcode")
    parser.add_argument("--list", action="store_true", help="print every object path and its class")
    parser.add_argument("path", nargs="?", help="the object to decrypt")
    args = parser.parse_args()
    if args.list == (args.path is not None):
        parser.error("give either PATH or --list")
    if args.path is not None and args.passcode_file is None and not args.no_passcode:
        parser.error("give --passcode-file FILE or --no-passcode")
    passcode = None
    if args.passcode_file is not None:
        with open(args.passcode_file, "rb") as f:
            passcode = f.read().split(b"\n", 1)[0]
        passcode = passcode[:-1] if passcode.endswith(b"\r") else passcode
    try:
        store = Store(args.store, Device(args.device, passcode))
        if args.list:
            damaged = []
            root_id = store.directory(os.path.join(args.store, "ns"), "/", ROOT_PARENT_ID, "")[0]
            for path, cls in store.walk(os.path.join(args.store, "ns"), root_id, "/", damaged):
                print(f"{path}\t{cls}")
            if damaged:
                raise Refused("; ".join(damaged))
        else:
            decrypt(store, store.find(args.path), sys.stdout.buffer)
        sys.stdout.flush()
    except (Refused, OSError) as error:
        print(f"decrypt.py: error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
