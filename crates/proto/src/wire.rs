//! Little-endian primitives shared by the body encoders and decoders.
//!
//! Writing appends to a `Vec<u8>`; reading goes through [`Reader`], which checks every
//! length against the bytes actually left *before* it allocates, so a hostile length
//! or count can never make the decoder reserve more memory than the body it was given.

use crate::codec::ProtoError;

/// Appending primitives to an output buffer.
pub(crate) trait Put {
    fn put_u8(&mut self, v: u8);
    fn put_u16(&mut self, v: u16);
    fn put_u32(&mut self, v: u32);
    fn put_u64(&mut self, v: u64);
    fn put_i64(&mut self, v: i64);
    fn put_bool(&mut self, v: bool);
    /// `u32 LE length | bytes`.
    fn put_bytes(&mut self, v: &[u8]);
    /// A list or string length as `u32 LE`.
    fn put_len(&mut self, n: usize);
}

impl Put for Vec<u8> {
    fn put_u8(&mut self, v: u8) {
        self.push(v);
    }
    fn put_u16(&mut self, v: u16) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn put_u32(&mut self, v: u32) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn put_u64(&mut self, v: u64) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn put_i64(&mut self, v: i64) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn put_bool(&mut self, v: bool) {
        self.push(u8::from(v));
    }
    fn put_bytes(&mut self, v: &[u8]) {
        self.put_len(v.len());
        self.extend_from_slice(v);
    }
    fn put_len(&mut self, n: usize) {
        // Anything this long could not fit in a frame anyway; encoding it silently
        // truncated would desynchronise the peer, so fail loudly instead.
        let n = u32::try_from(n).expect("hetch-proto: string or list longer than u32::MAX");
        self.put_u32(n);
    }
}

/// A cursor over one frame body. Every error it returns is
/// [`ProtoError::Malformed`] naming the frame being decoded.
pub(crate) struct Reader<'a> {
    rest: &'a [u8],
    what: &'static str,
}

impl<'a> Reader<'a> {
    /// A reader over `body`, reporting errors as malformed `what` frames.
    pub(crate) fn new(what: &'static str, body: &'a [u8]) -> Self {
        Reader { rest: body, what }
    }

    /// A [`ProtoError::Malformed`] for this frame.
    pub(crate) fn err(&self, why: &'static str) -> ProtoError {
        ProtoError::Malformed {
            what: self.what,
            why,
        }
    }

    /// Fails unless the whole body was consumed.
    pub(crate) fn finish(self) -> Result<(), ProtoError> {
        if self.rest.is_empty() {
            Ok(())
        } else {
            Err(self.err("trailing bytes after the body"))
        }
    }

    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], ProtoError> {
        if n > self.rest.len() {
            return Err(self.err("body ends early"));
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }

    pub(crate) fn array<const N: usize>(&mut self) -> Result<[u8; N], ProtoError> {
        let Some((head, tail)) = self.rest.split_first_chunk::<N>() else {
            return Err(self.err("body ends early"));
        };
        self.rest = tail;
        Ok(*head)
    }

    pub(crate) fn u8(&mut self) -> Result<u8, ProtoError> {
        Ok(self.array::<1>()?[0])
    }
    pub(crate) fn u16(&mut self) -> Result<u16, ProtoError> {
        self.array().map(u16::from_le_bytes)
    }
    pub(crate) fn u32(&mut self) -> Result<u32, ProtoError> {
        self.array().map(u32::from_le_bytes)
    }
    pub(crate) fn u64(&mut self) -> Result<u64, ProtoError> {
        self.array().map(u64::from_le_bytes)
    }
    pub(crate) fn i64(&mut self) -> Result<i64, ProtoError> {
        self.array().map(i64::from_le_bytes)
    }

    /// A strict boolean: only 0 and 1 are accepted, so every value has one encoding.
    pub(crate) fn bool(&mut self) -> Result<bool, ProtoError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(self.err("boolean is neither 0 nor 1")),
        }
    }

    /// `u32 length | bytes`; the length is checked against the remaining body
    /// before anything is allocated.
    pub(crate) fn bytes(&mut self) -> Result<Vec<u8>, ProtoError> {
        let len = self.u32()? as usize;
        Ok(self.take(len)?.to_vec())
    }

    /// A byte string that must be valid UTF-8.
    pub(crate) fn string(&mut self) -> Result<String, ProtoError> {
        let bytes = self.bytes()?;
        String::from_utf8(bytes).map_err(|_| self.err("string is not valid UTF-8"))
    }

    /// `u8` tag 0 (absent) or 1 (present, then the value).
    pub(crate) fn option<T>(
        &mut self,
        value: impl FnOnce(&mut Self) -> Result<T, ProtoError>,
    ) -> Result<Option<T>, ProtoError> {
        match self.u8()? {
            0 => Ok(None),
            1 => value(self).map(Some),
            _ => Err(self.err("option tag is neither 0 nor 1")),
        }
    }

    /// A list count, rejected if `count` items of at least `min_item_len` bytes each
    /// cannot fit in what is left of the body. Callers may then reserve `count` items.
    pub(crate) fn count(&mut self, min_item_len: usize) -> Result<usize, ProtoError> {
        debug_assert!(min_item_len > 0);
        let count = self.u32()? as usize;
        match count.checked_mul(min_item_len) {
            Some(need) if need <= self.rest.len() => Ok(count),
            _ => Err(self.err("list count exceeds the body")),
        }
    }

    /// `u32 count | items`, each item read by `item`.
    pub(crate) fn list<T>(
        &mut self,
        min_item_len: usize,
        mut item: impl FnMut(&mut Self) -> Result<T, ProtoError>,
    ) -> Result<Vec<T>, ProtoError> {
        let count = self.count(min_item_len)?;
        let mut items = Vec::with_capacity(count);
        for _ in 0..count {
            items.push(item(self)?);
        }
        Ok(items)
    }
}
