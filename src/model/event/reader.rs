//! A bounds-checked, iterative MessagePack cursor: reads one value's header
//! with `rmp`'s marker table and skips whole values without recursion, so
//! hostile nesting cannot exhaust the stack. Used by the `msgpack` form.

use rmp::Marker;

/// The input ended early or used the reserved marker `0xc1`.
pub(super) struct Malformed;

/// A MessagePack value that is not a container.
#[derive(Clone, Copy)]
pub(super) enum Scalar<'a> {
    /// Any int type, widened so u64 and i64 both fit.
    Int(i128),
    /// float32 or float64.
    Float(f64),
    /// A str's raw bytes (UTF-8 not yet checked).
    Str(&'a [u8]),
    /// nil, bool, bin, ext, or a skipped container.
    Other,
}

/// One value's header: a scalar (payload consumed) or a container's length.
pub(super) enum Head<'a> {
    Scalar(Scalar<'a>),
    /// Array with this many elements still to read.
    Array(u64),
    /// Map with this many key/value pairs still to read.
    Map(u64),
}

impl Head<'_> {
    /// How many values follow this head as its contents: an array's
    /// elements, a map's keys and values, none for a scalar.
    pub(super) fn contents(&self) -> u64 {
        match self {
            Head::Scalar(_) => 0,
            Head::Array(n) => *n,
            Head::Map(n) => 2 * n,
        }
    }
}

/// Bounds-checked cursor over MessagePack bytes.
pub(super) struct Reader<'a> {
    pub(super) buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Malformed> {
        if n > self.buf.len() {
            return Err(Malformed);
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    fn be<const N: usize>(&mut self) -> Result<[u8; N], Malformed> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    fn len8(&mut self) -> Result<usize, Malformed> {
        Ok(usize::from(self.be::<1>()?[0]))
    }

    fn len16(&mut self) -> Result<usize, Malformed> {
        Ok(usize::from(u16::from_be_bytes(self.be()?)))
    }

    fn len32(&mut self) -> Result<usize, Malformed> {
        usize::try_from(u32::from_be_bytes(self.be()?)).map_err(|_| Malformed)
    }

    /// Skips a byte payload of `len` bytes (plus `extra`, e.g. an ext type).
    fn skip_bytes(&mut self, len: usize, extra: usize) -> Result<Scalar<'a>, Malformed> {
        self.take(len.checked_add(extra).ok_or(Malformed)?)?;
        Ok(Scalar::Other)
    }

    /// Reads one value's marker and, for scalars, its payload.
    pub(super) fn head(&mut self) -> Result<Head<'a>, Malformed> {
        let scalar = match Marker::from_u8(self.be::<1>()?[0]) {
            Marker::FixPos(n) => Scalar::Int(i128::from(n)),
            Marker::FixNeg(n) => Scalar::Int(i128::from(n)),
            Marker::U8 => Scalar::Int(i128::from(u8::from_be_bytes(self.be()?))),
            Marker::U16 => Scalar::Int(i128::from(u16::from_be_bytes(self.be()?))),
            Marker::U32 => Scalar::Int(i128::from(u32::from_be_bytes(self.be()?))),
            Marker::U64 => Scalar::Int(i128::from(u64::from_be_bytes(self.be()?))),
            Marker::I8 => Scalar::Int(i128::from(i8::from_be_bytes(self.be()?))),
            Marker::I16 => Scalar::Int(i128::from(i16::from_be_bytes(self.be()?))),
            Marker::I32 => Scalar::Int(i128::from(i32::from_be_bytes(self.be()?))),
            Marker::I64 => Scalar::Int(i128::from(i64::from_be_bytes(self.be()?))),
            Marker::F32 => Scalar::Float(f64::from(f32::from_be_bytes(self.be()?))),
            Marker::F64 => Scalar::Float(f64::from_be_bytes(self.be()?)),
            Marker::FixStr(n) => Scalar::Str(self.take(usize::from(n))?),
            Marker::Str8 => Scalar::Str(self.len8().and_then(|n| self.take(n))?),
            Marker::Str16 => Scalar::Str(self.len16().and_then(|n| self.take(n))?),
            Marker::Str32 => Scalar::Str(self.len32().and_then(|n| self.take(n))?),
            Marker::Null | Marker::True | Marker::False => Scalar::Other,
            Marker::Bin8 => self.len8().and_then(|n| self.skip_bytes(n, 0))?,
            Marker::Bin16 => self.len16().and_then(|n| self.skip_bytes(n, 0))?,
            Marker::Bin32 => self.len32().and_then(|n| self.skip_bytes(n, 0))?,
            Marker::FixExt1 => self.skip_bytes(1, 1)?,
            Marker::FixExt2 => self.skip_bytes(2, 1)?,
            Marker::FixExt4 => self.skip_bytes(4, 1)?,
            Marker::FixExt8 => self.skip_bytes(8, 1)?,
            Marker::FixExt16 => self.skip_bytes(16, 1)?,
            Marker::Ext8 => self.len8().and_then(|n| self.skip_bytes(n, 1))?,
            Marker::Ext16 => self.len16().and_then(|n| self.skip_bytes(n, 1))?,
            Marker::Ext32 => self.len32().and_then(|n| self.skip_bytes(n, 1))?,
            Marker::FixArray(n) => return Ok(Head::Array(u64::from(n))),
            Marker::Array16 => return Ok(Head::Array(self.len16()? as u64)),
            Marker::Array32 => return Ok(Head::Array(self.len32()? as u64)),
            Marker::FixMap(n) => return Ok(Head::Map(u64::from(n))),
            Marker::Map16 => return Ok(Head::Map(self.len16()? as u64)),
            Marker::Map32 => return Ok(Head::Map(self.len32()? as u64)),
            Marker::Reserved => return Err(Malformed),
        };
        Ok(Head::Scalar(scalar))
    }

    /// Skips `pending` whole values, iteratively. Every value takes at least
    /// one byte, so a count larger than what is left fails at once; this
    /// bounds the work by the input's length.
    pub(super) fn skip(&mut self, mut pending: u64) -> Result<(), Malformed> {
        while pending > 0 {
            if pending > self.buf.len() as u64 {
                return Err(Malformed);
            }
            pending = pending - 1 + self.head()?.contents();
        }
        Ok(())
    }

    /// Reads one value; a container is skipped and reads as `Other`.
    pub(super) fn value(&mut self) -> Result<Scalar<'a>, Malformed> {
        match self.head()? {
            Head::Scalar(s) => Ok(s),
            container => self.skip(container.contents()).map(|_| Scalar::Other),
        }
    }
}
