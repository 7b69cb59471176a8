//! The EHABI frame unwinding instructions (IHI0038, "Frame unwinding instructions"), decoded
//! from the byte sequence of an index or table entry.
//!
//! Bytes are taken in the order the personality routines execute them: most significant byte of
//! each word first (the entry parsing in [`crate::entry`] has already put them in that order).

use core::fmt;

/// One frame unwinding instruction. `vsp` is the virtual stack pointer (the unwinder's r13).
///
/// Core register masks are indexed by register number: bit `n` is `r[n]` (so for
/// [`Instruction::PopMask`] bits 4..=15 may be set, for [`Instruction::PopLowMask`] bits 0..=3).
/// Pops load the lowest-numbered register from the lowest address, starting at `vsp`, and leave
/// `vsp` past the last word, except that a popped r13 becomes `vsp` after the whole pop.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Instruction {
    /// `00xxxxxx`: `vsp += (x << 2) + 4` (the value is the byte count, 4..=256).
    VspAdd(u32),
    /// `01xxxxxx`: `vsp -= (x << 2) + 4` (the value is the byte count, 4..=256).
    VspSub(u32),
    /// `10000000 00000000`: refuse to unwind (e.g. out of a cleanup).
    RefuseToUnwind,
    /// `1000iiii iiiiiiii` (not all zero): pop the registers of the mask (bit `n` = `r[n]`,
    /// only bits 4..=15 can be set).
    PopMask(u16),
    /// `1001nnnn` (`n` != 13, 15): `vsp = r[n]`.
    SetVspFromReg(u8),
    /// `10011101` (ARM register-to-register moves) or `10011111` (iWMMXt moves): reserved;
    /// the value is the opcode byte.
    Reserved(u8),
    /// `10100nnn` / `10101nnn`: pop `r4..=r[n]` (`n` = 4 + nnn), then `r14` if `lr`.
    PopR4ToRn {
        /// The highest register of the range, 4..=11.
        n: u8,
        /// r14 is popped too, after the range.
        lr: bool,
    },
    /// `10110000`: finish; the remaining bytes are padding.
    Finish,
    /// `10110001 0000iiii` (not all zero): pop the registers of the mask (bit `n` = `r[n]`,
    /// bits 0..=3).
    PopLowMask(u8),
    /// `10110010 uleb128`: `vsp += 0x204 + (uleb128 << 2)` (the value is the byte count).
    VspAddLarge(u32),
    /// VFP double registers `d[first]..d[first + count - 1]`: `10110011 sssscccc` and
    /// `10111nnn` (saved by FSTMFDX: one extra pad word), `11001000 sssscccc` (d16 and up),
    /// `11001001 sssscccc` and `11010nnn` (saved by VPUSH / FSTMFDD). Only moves `vsp`.
    PopVfp {
        /// The first register.
        first: u8,
        /// How many registers, 1..=16.
        count: u8,
        /// Saved by FSTMFDX: `vsp` moves by `8 * count + 4` instead of `8 * count`.
        fstmfdx: bool,
    },
    /// iWMMXt data registers `wR[first]..wR[first + count - 1]`: `11000nnn` (nnn != 6, 7) and
    /// `11000110 sssscccc`. Only moves `vsp` (8 bytes each).
    PopWmmx {
        /// The first register.
        first: u8,
        /// How many registers, 1..=16.
        count: u8,
    },
    /// `11000111 0000iiii` (not all zero): pop iWMMXt control registers wCGR0..3 under the mask.
    /// Only moves `vsp` (4 bytes each).
    PopWmmxControl(u8),
    /// `10110100`: pop the return address authentication code pseudo-register (PACBTI,
    /// EHABI 2022 and later). Only moves `vsp` (4 bytes).
    PopRaAuthCode,
    /// `10110101`: use the current `vsp` as the modifier for return address authentication
    /// (PACBTI). No effect on the registers recovered here.
    RaAuthModifier,
    /// A spare (unallocated) opcode; the value is its first byte. Two-byte spares
    /// (`10110001 xxxxyyyy`, `11000111 xxxxyyyy`) consume their second byte.
    Spare(u8),
}

impl Instruction {
    /// How many bytes `vsp` moves up, for the instructions that only move it (pops of
    /// registers this crate does not track, and `vsp` additions); `None` for the others.
    pub fn vsp_advance(&self) -> Option<u32> {
        Some(match *self {
            Instruction::VspAdd(n) | Instruction::VspAddLarge(n) => n,
            Instruction::PopVfp { count, fstmfdx, .. } => {
                // At most 8 * 255 + 4: cannot saturate.
                u32::from(count)
                    .saturating_mul(8)
                    .saturating_add(if fstmfdx { 4 } else { 0 })
            }
            Instruction::PopWmmx { count, .. } => u32::from(count).saturating_mul(8),
            Instruction::PopWmmxControl(mask) => mask.count_ones().saturating_mul(4),
            Instruction::PopRaAuthCode => 4,
            Instruction::RaAuthModifier => 0,
            _ => return None,
        })
    }
}

/// Why a byte sequence could not be decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DecodeError {
    /// A multi-byte instruction starting at byte `at` runs past the end of the sequence.
    Truncated {
        /// Its first byte.
        opcode: u8,
        /// Its position.
        at: usize,
    },
    /// The ULEB128 operand of the `0xb2` instruction at byte `at` does not fit in 32 bits
    /// once scaled.
    Overflow {
        /// Its position.
        at: usize,
    },
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            DecodeError::Truncated { opcode, at } => {
                write!(
                    f,
                    "unwind instruction {opcode:#04x} at byte {at} is truncated"
                )
            }
            DecodeError::Overflow { at } => {
                write!(f, "vsp increment at byte {at} does not fit in 32 bits")
            }
        }
    }
}

impl std::error::Error for DecodeError {}

/// Decodes instructions one at a time. Ends after [`Instruction::Finish`], after an error, or at
/// the end of the bytes (an implicit finish).
#[derive(Clone, Debug)]
pub struct Decoder<'a> {
    bytes: &'a [u8],
    pos: usize,
    done: bool,
}

impl<'a> Decoder<'a> {
    /// A decoder for `bytes`.
    pub fn new(bytes: &'a [u8]) -> Self {
        Decoder {
            bytes,
            pos: 0,
            done: false,
        }
    }

    /// The operand byte of the instruction `opcode` that started at `at`.
    fn operand(&mut self, opcode: u8, at: usize) -> Result<u8, DecodeError> {
        let b = *self
            .bytes
            .get(self.pos)
            .ok_or(DecodeError::Truncated { opcode, at })?;
        // `pos` indexes a byte that exists: below `usize::MAX`.
        self.pos = self.pos.saturating_add(1);
        Ok(b)
    }

    fn uleb128(&mut self, opcode: u8, at: usize) -> Result<u32, DecodeError> {
        let mut value: u64 = 0;
        let mut shift = 0u32;
        let mut overflow = false;
        loop {
            let b = self.operand(opcode, at)?;
            let bits = u64::from(b & 0x7f);
            if bits != 0 {
                if shift < 32 {
                    value |= bits << shift;
                } else {
                    overflow = true;
                }
            }
            if b & 0x80 == 0 {
                break;
            }
            shift = shift.saturating_add(7);
        }
        if overflow {
            return Err(DecodeError::Overflow { at });
        }
        value
            .checked_mul(4)
            .and_then(|v| v.checked_add(0x204))
            .and_then(|v| u32::try_from(v).ok())
            .ok_or(DecodeError::Overflow { at })
    }

    fn instruction(&mut self, b: u8, at: usize) -> Result<Instruction, DecodeError> {
        // Register ranges `sssscccc`: first register, count - 1.
        // (Operands are masked: no arithmetic below can overflow.)
        let range = |x: u8| (x >> 4, (x & 0x0f).wrapping_add(1));
        Ok(match b {
            0x00..=0x3f => Instruction::VspAdd((u32::from(b & 0x3f) << 2).wrapping_add(4)),
            0x40..=0x7f => Instruction::VspSub((u32::from(b & 0x3f) << 2).wrapping_add(4)),
            0x80..=0x8f => {
                let b2 = self.operand(b, at)?;
                if b == 0x80 && b2 == 0 {
                    Instruction::RefuseToUnwind
                } else {
                    Instruction::PopMask((u16::from(b & 0x0f) << 12) | (u16::from(b2) << 4))
                }
            }
            0x9d | 0x9f => Instruction::Reserved(b),
            0x90..=0x9f => Instruction::SetVspFromReg(b & 0x0f),
            0xa0..=0xaf => Instruction::PopR4ToRn {
                n: (b & 0x07).wrapping_add(4),
                lr: b & 0x08 != 0,
            },
            0xb0 => Instruction::Finish,
            0xb1 => {
                let b2 = self.operand(b, at)?;
                if b2 == 0 || b2 & 0xf0 != 0 {
                    Instruction::Spare(b)
                } else {
                    Instruction::PopLowMask(b2)
                }
            }
            0xb2 => Instruction::VspAddLarge(self.uleb128(b, at)?),
            0xb3 => {
                let (first, count) = range(self.operand(b, at)?);
                Instruction::PopVfp {
                    first,
                    count,
                    fstmfdx: true,
                }
            }
            0xb4 => Instruction::PopRaAuthCode,
            0xb5 => Instruction::RaAuthModifier,
            0xb6 | 0xb7 => Instruction::Spare(b),
            0xb8..=0xbf => Instruction::PopVfp {
                first: 8,
                count: (b & 0x07).wrapping_add(1),
                fstmfdx: true,
            },
            0xc0..=0xc5 => Instruction::PopWmmx {
                first: 10,
                count: (b & 0x07).wrapping_add(1),
            },
            0xc6 => {
                let (first, count) = range(self.operand(b, at)?);
                Instruction::PopWmmx { first, count }
            }
            0xc7 => {
                let b2 = self.operand(b, at)?;
                if b2 == 0 || b2 & 0xf0 != 0 {
                    Instruction::Spare(b)
                } else {
                    Instruction::PopWmmxControl(b2)
                }
            }
            0xc8 | 0xc9 => {
                let (first, count) = range(self.operand(b, at)?);
                Instruction::PopVfp {
                    // `first` < 16: d16 and up.
                    first: if b == 0xc8 { first | 16 } else { first },
                    count,
                    fstmfdx: false,
                }
            }
            0xca..=0xcf => Instruction::Spare(b),
            0xd0..=0xd7 => Instruction::PopVfp {
                first: 8,
                count: (b & 0x07).wrapping_add(1),
                fstmfdx: false,
            },
            0xd8..=0xff => Instruction::Spare(b),
        })
    }
}

impl Iterator for Decoder<'_> {
    type Item = Result<Instruction, DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let at = self.pos;
        let Some(&b) = self.bytes.get(at) else {
            self.done = true;
            return None;
        };
        self.pos = self.pos.saturating_add(1);
        let r = self.instruction(b, at);
        if matches!(r, Err(_) | Ok(Instruction::Finish)) {
            self.done = true;
        }
        Some(r)
    }
}

/// Decodes `bytes` up to and including the first [`Instruction::Finish`] (later bytes are
/// ignored) or to the end (an implicit finish, not added to the list). Refuse-to-unwind, spare
/// and reserved opcodes are returned as instructions; only truncated or overflowing
/// instructions are errors.
pub fn decode(bytes: &[u8]) -> Result<Vec<Instruction>, DecodeError> {
    Decoder::new(bytes).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use Instruction::*;

    fn one(bytes: &[u8]) -> Instruction {
        let v = decode(bytes).unwrap();
        assert_eq!(v.len(), 1, "{bytes:02x?} decoded to {v:?}");
        v[0]
    }

    fn truncated(bytes: &[u8]) -> DecodeError {
        decode(bytes).unwrap_err()
    }

    #[test]
    fn vsp_add_and_sub() {
        assert_eq!(one(&[0x00]), VspAdd(4));
        assert_eq!(one(&[0x01]), VspAdd(8));
        assert_eq!(one(&[0x3f]), VspAdd(256));
        assert_eq!(one(&[0x40]), VspSub(4));
        assert_eq!(one(&[0x4c]), VspSub(52));
        assert_eq!(one(&[0x7f]), VspSub(256));
        assert_eq!(VspAdd(12).vsp_advance(), Some(12));
        assert_eq!(VspSub(12).vsp_advance(), None);
    }

    #[test]
    fn pop_under_mask_and_refuse() {
        assert_eq!(one(&[0x80, 0x00]), RefuseToUnwind);
        assert_eq!(one(&[0x80, 0x01]), PopMask(1 << 4));
        assert_eq!(one(&[0x80, 0x80]), PopMask(1 << 11));
        assert_eq!(one(&[0x81, 0x00]), PopMask(1 << 12));
        assert_eq!(one(&[0x84, 0x00]), PopMask(1 << 14));
        assert_eq!(one(&[0x88, 0x00]), PopMask(1 << 15));
        assert_eq!(one(&[0x84, 0x08]), PopMask((1 << 7) | (1 << 14)));
        assert_eq!(one(&[0x8f, 0xff]), PopMask(0xfff0));
        assert_eq!(
            truncated(&[0x84]),
            DecodeError::Truncated {
                opcode: 0x84,
                at: 0
            }
        );
        assert_eq!(
            truncated(&[0x01, 0x80]),
            DecodeError::Truncated {
                opcode: 0x80,
                at: 1
            }
        );
    }

    #[test]
    fn set_vsp_and_reserved() {
        for n in 0..16u8 {
            let expected = if n == 13 || n == 15 {
                Reserved(0x90 | n)
            } else {
                SetVspFromReg(n)
            };
            assert_eq!(one(&[0x90 | n]), expected);
        }
    }

    #[test]
    fn pop_ranges() {
        assert_eq!(one(&[0xa0]), PopR4ToRn { n: 4, lr: false });
        assert_eq!(one(&[0xa3]), PopR4ToRn { n: 7, lr: false });
        assert_eq!(one(&[0xa7]), PopR4ToRn { n: 11, lr: false });
        assert_eq!(one(&[0xa8]), PopR4ToRn { n: 4, lr: true });
        assert_eq!(one(&[0xaf]), PopR4ToRn { n: 11, lr: true });
    }

    #[test]
    fn finish_ends_decoding() {
        assert_eq!(one(&[0xb0]), Finish);
        assert_eq!(
            decode(&[0xa8, 0xb0, 0x84]).unwrap(),
            [PopR4ToRn { n: 4, lr: true }, Finish]
        );
        assert_eq!(decode(&[0xb0, 0xb0, 0xb0]).unwrap(), [Finish]);
        assert_eq!(decode(&[]).unwrap(), []);
        // Without a finish, the end of the bytes ends the list.
        assert_eq!(
            decode(&[0x02, 0xaf]).unwrap(),
            [VspAdd(12), PopR4ToRn { n: 11, lr: true }]
        );
    }

    #[test]
    fn pop_low_registers_and_spares() {
        assert_eq!(one(&[0xb1, 0x01]), PopLowMask(1));
        assert_eq!(one(&[0xb1, 0x08]), PopLowMask(8));
        assert_eq!(one(&[0xb1, 0x0f]), PopLowMask(0x0f));
        assert_eq!(one(&[0xb1, 0x00]), Spare(0xb1));
        assert_eq!(one(&[0xb1, 0x10]), Spare(0xb1));
        assert_eq!(one(&[0xb1, 0xf1]), Spare(0xb1));
        assert_eq!(
            truncated(&[0xb1]),
            DecodeError::Truncated {
                opcode: 0xb1,
                at: 0
            }
        );
        // The two-byte spare consumes its operand.
        assert_eq!(
            decode(&[0xb1, 0x20, 0x01]).unwrap(),
            [Spare(0xb1), VspAdd(8)]
        );
    }

    #[test]
    fn vsp_add_large() {
        assert_eq!(one(&[0xb2, 0x00]), VspAddLarge(0x204));
        assert_eq!(one(&[0xb2, 0x01]), VspAddLarge(0x208));
        assert_eq!(one(&[0xb2, 0x7f]), VspAddLarge(0x204 + (127 << 2)));
        assert_eq!(one(&[0xb2, 0x81, 0x01]), VspAddLarge(0x204 + (129 << 2)));
        // A redundant encoding of 0.
        assert_eq!(one(&[0xb2, 0x80, 0x80, 0x00]), VspAddLarge(0x204));
        // The largest value that fits: (2^32 - 1 - 0x204) / 4.
        let max = (u32::MAX - 0x204) / 4;
        let mut bytes = vec![0xb2];
        let mut v = max;
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                bytes.push(b);
                break;
            }
            bytes.push(b | 0x80);
        }
        assert_eq!(one(&bytes), VspAddLarge(0x204 + max * 4));
        assert_eq!(
            decode(&[0xb2, 0xff, 0xff, 0xff, 0xff, 0x0f]).unwrap_err(),
            DecodeError::Overflow { at: 0 }
        );
        assert_eq!(
            decode(&[0xb2, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01]).unwrap_err(),
            DecodeError::Overflow { at: 0 }
        );
        assert_eq!(
            truncated(&[0xb2]),
            DecodeError::Truncated {
                opcode: 0xb2,
                at: 0
            }
        );
        assert_eq!(
            truncated(&[0x00, 0xb2, 0x81]),
            DecodeError::Truncated {
                opcode: 0xb2,
                at: 1
            }
        );
    }

    #[test]
    fn vfp_pops() {
        let fstmfdx = |first, count| PopVfp {
            first,
            count,
            fstmfdx: true,
        };
        let vpush = |first, count| PopVfp {
            first,
            count,
            fstmfdx: false,
        };
        assert_eq!(one(&[0xb3, 0x12]), fstmfdx(1, 3));
        assert_eq!(one(&[0xb3, 0x12]).vsp_advance(), Some(28));
        assert_eq!(one(&[0xb8]), fstmfdx(8, 1));
        assert_eq!(one(&[0xbf]), fstmfdx(8, 8));
        assert_eq!(one(&[0xbf]).vsp_advance(), Some(68));
        assert_eq!(one(&[0xc8, 0x00]), vpush(16, 1));
        assert_eq!(one(&[0xc8, 0x1f]), vpush(17, 16));
        assert_eq!(one(&[0xc9, 0x84]), vpush(8, 5));
        assert_eq!(one(&[0xc9, 0x84]).vsp_advance(), Some(40));
        assert_eq!(one(&[0xd0]), vpush(8, 1));
        assert_eq!(one(&[0xd7]), vpush(8, 8));
        assert_eq!(one(&[0xd7]).vsp_advance(), Some(64));
        for op in [0xb3, 0xc8, 0xc9] {
            assert_eq!(
                truncated(&[op]),
                DecodeError::Truncated { opcode: op, at: 0 }
            );
        }
    }

    #[test]
    fn wmmx_pops() {
        assert_eq!(
            one(&[0xc0]),
            PopWmmx {
                first: 10,
                count: 1
            }
        );
        assert_eq!(
            one(&[0xc5]),
            PopWmmx {
                first: 10,
                count: 6
            }
        );
        assert_eq!(one(&[0xc5]).vsp_advance(), Some(48));
        assert_eq!(one(&[0xc6, 0x23]), PopWmmx { first: 2, count: 4 });
        assert_eq!(one(&[0xc7, 0x05]), PopWmmxControl(5));
        assert_eq!(one(&[0xc7, 0x05]).vsp_advance(), Some(8));
        assert_eq!(one(&[0xc7, 0x00]), Spare(0xc7));
        assert_eq!(one(&[0xc7, 0x10]), Spare(0xc7));
        for op in [0xc6, 0xc7] {
            assert_eq!(
                truncated(&[op]),
                DecodeError::Truncated { opcode: op, at: 0 }
            );
        }
    }

    #[test]
    fn pac_and_spare_single_bytes() {
        assert_eq!(one(&[0xb4]), PopRaAuthCode);
        assert_eq!(PopRaAuthCode.vsp_advance(), Some(4));
        assert_eq!(one(&[0xb5]), RaAuthModifier);
        assert_eq!(RaAuthModifier.vsp_advance(), Some(0));
        for op in [0xb6u8, 0xb7, 0xca, 0xcb, 0xcc, 0xcd, 0xce, 0xcf]
            .into_iter()
            .chain(0xd8..=0xff)
        {
            assert_eq!(one(&[op]), Spare(op), "{op:#x}");
        }
    }

    #[test]
    fn every_byte_decodes_or_is_truncated() {
        // Every first byte alone: a one-byte instruction or a truncated multi-byte one.
        for b in 0..=255u8 {
            match decode(&[b]) {
                Ok(v) => assert_eq!(v.len(), 1),
                Err(DecodeError::Truncated { opcode, at: 0 }) => {
                    assert_eq!(opcode, b);
                    assert!(matches!(b, 0x80..=0x8f | 0xb1 | 0xb2 | 0xb3 | 0xc6..=0xc9));
                }
                Err(e) => panic!("{b:#x}: {e}"),
            }
        }
    }
}
