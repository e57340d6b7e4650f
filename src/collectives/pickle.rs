//! A reader of pickle protocol 2 for the shapes PyTorch's flight recorder writes: dicts,
//! lists, tuples, strings, integers, floats, booleans and `None`, with the memo that shares
//! them. Every other opcode (globals, reduce, persistent ids, bytes) is refused: nothing in
//! a dump is ever called or built beyond plain data.
//!
//! `serde-pickle` refuses FR's pickles ("recursive structure found": torch memoizes each
//! frame once and names it from every entry), so objects live in an arena while the stream
//! is read and are expanded into [`Value`]s at the end, under the [`Budget`]: a structure
//! that names itself expands past [`super::value::MAX_DEPTH`] and is refused there.

use super::DumpError;
use super::value::{Budget, Value};

/// One object while the stream is read: containers hold arena indices, so a memoized dict
/// filled after it was memoized is seen filled wherever the memo names it.
enum Node {
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    List(Vec<usize>),
    Dict(Vec<(usize, usize)>),
}

/// What the stack holds: an object, or a MARK.
#[derive(Clone, Copy)]
enum Slot {
    Obj(usize),
    Mark,
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
    arena: Vec<Node>,
    stack: Vec<Slot>,
    memo: std::collections::HashMap<u32, usize>,
}

/// Reads one pickle (protocol 2 or lower) into a [`Value`].
pub(crate) fn from_pickle(bytes: &[u8]) -> Result<Value, DumpError> {
    let mut r = Reader {
        bytes,
        at: 0,
        arena: Vec::new(),
        stack: Vec::new(),
        memo: std::collections::HashMap::new(),
    };
    let root = r.run()?;
    expand(&r.arena, root, 0, &mut Budget::default())
}

impl Reader<'_> {
    fn bad(&self, what: &str) -> DumpError {
        DumpError::Pickle {
            at: self.at,
            what: what.to_owned(),
        }
    }

    fn take(&mut self, n: usize) -> Result<&[u8], DumpError> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len());
        let Some(end) = end else {
            return Err(self.bad("the pickle ends inside an opcode"));
        };
        let s = &self.bytes[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn u8(&mut self) -> Result<u8, DumpError> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, DumpError> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    fn u32(&mut self) -> Result<u32, DumpError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn push(&mut self, node: Node) -> Result<(), DumpError> {
        // Every opcode adds at most one object, and each takes a byte: the arena is bounded
        // by the input, and so is the stack.
        self.arena.push(node);
        self.stack.push(Slot::Obj(self.arena.len() - 1));
        Ok(())
    }

    fn pop(&mut self) -> Result<usize, DumpError> {
        match self.stack.pop() {
            Some(Slot::Obj(i)) => Ok(i),
            Some(Slot::Mark) => Err(self.bad("a MARK where an object was expected")),
            None => Err(self.bad("the stack is empty")),
        }
    }

    fn top(&self) -> Result<usize, DumpError> {
        match self.stack.last() {
            Some(Slot::Obj(i)) => Ok(*i),
            _ => Err(self.bad("no object on the stack")),
        }
    }

    /// The objects above the last MARK, the MARK removed.
    fn pop_mark(&mut self) -> Result<Vec<usize>, DumpError> {
        let Some(mark) = self.stack.iter().rposition(|s| matches!(s, Slot::Mark)) else {
            return Err(self.bad("no MARK on the stack"));
        };
        let items = self
            .stack
            .drain(mark..)
            .skip(1)
            .filter_map(|s| match s {
                Slot::Obj(i) => Some(i),
                Slot::Mark => None,
            })
            .collect();
        Ok(items)
    }

    fn string(&mut self, len: usize) -> Result<(), DumpError> {
        let at = self.at;
        let raw = self.take(len)?;
        let s = std::str::from_utf8(raw)
            .map_err(|_| DumpError::Pickle {
                at,
                what: "a string that is not UTF-8".to_owned(),
            })?
            .to_owned();
        self.push(Node::Str(s))
    }

    fn tuple(&mut self, n: usize) -> Result<(), DumpError> {
        let mut items = Vec::with_capacity(n);
        for _ in 0..n {
            items.push(self.pop()?);
        }
        items.reverse();
        self.push(Node::List(items))
    }

    fn put(&mut self, key: u32) -> Result<(), DumpError> {
        let top = self.top()?;
        self.memo.insert(key, top);
        Ok(())
    }

    fn get(&mut self, key: u32) -> Result<(), DumpError> {
        let Some(&i) = self.memo.get(&key) else {
            return Err(self.bad("a memo key that was never put"));
        };
        self.stack.push(Slot::Obj(i));
        Ok(())
    }

    fn append(&mut self, list: usize, items: Vec<usize>) -> Result<(), DumpError> {
        match &mut self.arena[list] {
            Node::List(v) => {
                v.extend(items);
                Ok(())
            }
            _ => Err(self.bad("APPEND to what is not a list")),
        }
    }

    fn set_items(&mut self, dict: usize, items: Vec<usize>) -> Result<(), DumpError> {
        if !items.len().is_multiple_of(2) {
            return Err(self.bad("SETITEMS with a key and no value"));
        }
        let pairs = items.chunks(2).map(|p| (p[0], p[1]));
        match &mut self.arena[dict] {
            Node::Dict(v) => {
                v.extend(pairs);
                Ok(())
            }
            _ => Err(self.bad("SETITEM on what is not a dict")),
        }
    }

    fn long1(&mut self) -> Result<(), DumpError> {
        let n = usize::from(self.u8()?);
        let raw = self.take(n)?;
        if n > 8 {
            return Err(self.bad("an integer wider than 64 bits"));
        }
        let negative = raw.last().is_some_and(|b| b & 0x80 != 0);
        let mut buf = [if negative { 0xff } else { 0 }; 8];
        buf[..n].copy_from_slice(raw);
        self.push(Node::Int(i64::from_le_bytes(buf)))
    }

    /// Reads opcodes up to STOP; the object left on the stack.
    fn run(&mut self) -> Result<usize, DumpError> {
        loop {
            let op = self.u8()?;
            match op {
                0x80 => {
                    let proto = self.u8()?;
                    if proto > 2 {
                        return Err(self.bad(&format!("pickle protocol {proto}, not 2")));
                    }
                }
                b'.' => return self.pop(),
                b'(' => self.stack.push(Slot::Mark),
                b'0' => {
                    self.stack.pop();
                }
                b'q' => {
                    let key = u32::from(self.u8()?);
                    self.put(key)?;
                }
                b'r' => {
                    let key = self.u32()?;
                    self.put(key)?;
                }
                b'h' => {
                    let key = u32::from(self.u8()?);
                    self.get(key)?;
                }
                b'j' => {
                    let key = self.u32()?;
                    self.get(key)?;
                }
                _ if self.scalar(op)? || self.container(op)? => {}
                other => {
                    self.at -= 1;
                    return Err(self.bad(&format!(
                        "opcode {other:#04x}, which FR's dumps never hold, is refused"
                    )));
                }
            }
        }
    }

    /// A scalar's opcode read (true), or not one (false).
    fn scalar(&mut self, op: u8) -> Result<bool, DumpError> {
        let node = match op {
            b'N' => Node::None,
            0x88 => Node::Bool(true),
            0x89 => Node::Bool(false),
            b'K' => Node::Int(i64::from(self.u8()?)),
            b'M' => Node::Int(i64::from(self.u16()?)),
            b'J' => Node::Int(i64::from(self.u32()? as i32)),
            0x8a => {
                self.long1()?;
                return Ok(true);
            }
            b'G' => {
                let b = self.take(8)?;
                let mut buf = [0; 8];
                buf.copy_from_slice(b);
                Node::Float(f64::from_be_bytes(buf))
            }
            b'X' => {
                let len = self.u32()? as usize;
                self.string(len)?;
                return Ok(true);
            }
            _ => return Ok(false),
        };
        self.push(node)?;
        Ok(true)
    }

    /// A list's, tuple's or dict's opcode read (true), or not one (false).
    fn container(&mut self, op: u8) -> Result<bool, DumpError> {
        match op {
            b']' | b')' => self.push(Node::List(Vec::new()))?,
            b'}' => self.push(Node::Dict(Vec::new()))?,
            0x85 => self.tuple(1)?,
            0x86 => self.tuple(2)?,
            0x87 => self.tuple(3)?,
            b't' | b'l' => {
                let items = self.pop_mark()?;
                self.push(Node::List(items))?;
            }
            b'd' => {
                let items = self.pop_mark()?;
                self.push(Node::Dict(Vec::new()))?;
                let dict = self.top()?;
                self.set_items(dict, items)?;
            }
            b'a' => {
                let item = self.pop()?;
                let list = self.top()?;
                self.append(list, vec![item])?;
            }
            b'e' => {
                let items = self.pop_mark()?;
                let list = self.top()?;
                self.append(list, items)?;
            }
            b's' => {
                let value = self.pop()?;
                let key = self.pop()?;
                let dict = self.top()?;
                self.set_items(dict, vec![key, value])?;
            }
            b'u' => {
                let items = self.pop_mark()?;
                let dict = self.top()?;
                self.set_items(dict, items)?;
            }
            _ => return Ok(false),
        }
        Ok(true)
    }
}

/// The tree below one arena object, within the budget: a node that contains itself is
/// refused at the depth bound, and a node named from many places counts every time.
fn expand(arena: &[Node], i: usize, depth: usize, budget: &mut Budget) -> Result<Value, DumpError> {
    budget.value(depth)?;
    Ok(match &arena[i] {
        Node::None => Value::None,
        Node::Bool(b) => Value::Bool(*b),
        Node::Int(v) => Value::Int(*v),
        Node::Float(v) => Value::Float(*v),
        Node::Str(s) => {
            budget.text(s.len())?;
            Value::Str(s.clone())
        }
        Node::List(items) => Value::List(
            items
                .iter()
                .map(|&c| expand(arena, c, depth + 1, budget))
                .collect::<Result<_, _>>()?,
        ),
        Node::Dict(items) => Value::Dict(
            items
                .iter()
                .map(|&(k, v)| {
                    Ok((
                        expand(arena, k, depth + 1, budget)?,
                        expand(arena, v, depth + 1, budget)?,
                    ))
                })
                .collect::<Result<_, DumpError>>()?,
        ),
    })
}
