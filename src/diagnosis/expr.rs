//! The small expression language rule files are written in.
//!
//! Conditions (`oom.reserved_unallocated_bytes >= oom.requested_bytes`) and computed fix
//! values (`round_down(vllm.kv_cache_tokens, 256)`) are strings in the rule TOML, parsed here
//! once at load time and evaluated against an incident's facts.
//!
//! Grammar, loosest binding first:
//!
//! ```text
//! or      := and ("or" and)*
//! and     := not ("and" not)*
//! not     := "not" not | compare
//! compare := sum (("<" | "<=" | ">" | ">=" | "==" | "!=") sum)?
//! sum     := product (("+" | "-") product)*
//! product := unary (("*" | "/" | "%") unary)*
//! unary   := "-" unary | atom
//! atom    := NUMBER [UNIT] | 'string' | "string" | true | false
//!          | NAME | NAME "(" [or ("," or)*] ")" | "(" or ")"
//! ```
//!
//! `NAME` is a catalogued fact or a rule-local `let` (dotted, `[a-z_][a-z0-9_.]*`). A number
//! may carry a size unit (`2GiB`, `512MiB`, `1.5GB` = 1.5e9) or `%` (`90%` = 0.9).
//!
//! Evaluation is three-valued: a fact that is not known is `Missing`, arithmetic and
//! comparisons on `Missing` are `Missing`, `and`/`or` follow Kleene logic, and a condition
//! holds only when it is exactly `true`. So `not (x > 1)` does **not** fire when `x` is
//! unknown: rules never conclude anything from absent evidence unless they say
//! `not has(x)` explicitly.

use std::fmt;
use std::sync::Arc;

/// A value during evaluation.
#[derive(Clone, Debug, PartialEq)]
pub enum Val {
    Num(f64),
    Bool(bool),
    Str(Arc<str>),
    Missing,
}

impl Val {
    pub fn is_true(&self) -> bool {
        matches!(self, Val::Bool(true))
    }
    pub fn num(&self) -> Option<f64> {
        match self {
            Val::Num(n) => Some(*n),
            _ => None,
        }
    }
}

impl From<&crate::facts::evidence::Value> for Val {
    fn from(v: &crate::facts::evidence::Value) -> Self {
        match v {
            crate::facts::evidence::Value::Num(n) => Val::Num(*n),
            crate::facts::evidence::Value::Bool(b) => Val::Bool(*b),
            crate::facts::evidence::Value::Str(s) => Val::Str(s.clone()),
        }
    }
}

/// Resolves names during evaluation.
pub trait Scope {
    fn lookup(&self, name: &str) -> Val;
}

/// A parse error, with the byte offset and length inside the expression text.
#[derive(Clone, Debug, PartialEq)]
pub struct ExprError {
    pub offset: usize,
    pub len: usize,
    pub message: String,
}

impl fmt::Display for ExprError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (at character {})", self.message, self.offset + 1)
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum BinOp {
    Or,
    And,
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
    Add,
    Sub,
    Mul,
    Div,
    Rem,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Func {
    Has,
    Min,
    Max,
    Floor,
    Ceil,
    Round,
    Abs,
    RoundDown,
    RoundUp,
    Pow2Floor,
    Clamp,
    Coalesce,
    If,
    Contains,
    StartsWith,
    DivisorAtMost,
}

impl Func {
    fn from_name(name: &str) -> Option<Func> {
        Some(match name {
            "has" => Func::Has,
            "min" => Func::Min,
            "max" => Func::Max,
            "floor" => Func::Floor,
            "ceil" => Func::Ceil,
            "round" => Func::Round,
            "abs" => Func::Abs,
            "round_down" => Func::RoundDown,
            "round_up" => Func::RoundUp,
            "pow2_floor" => Func::Pow2Floor,
            "clamp" => Func::Clamp,
            "coalesce" => Func::Coalesce,
            "if" => Func::If,
            "contains" => Func::Contains,
            "starts_with" => Func::StartsWith,
            "divisor_at_most" => Func::DivisorAtMost,
            _ => return None,
        })
    }

    /// Allowed argument counts (min, max).
    fn arity(self) -> (usize, usize) {
        match self {
            Func::Has | Func::Floor | Func::Ceil | Func::Round | Func::Abs | Func::Pow2Floor => {
                (1, 1)
            }
            Func::RoundDown
            | Func::RoundUp
            | Func::Contains
            | Func::StartsWith
            | Func::DivisorAtMost => (2, 2),
            Func::Clamp | Func::If => (3, 3),
            Func::Min | Func::Max | Func::Coalesce => (1, 16),
        }
    }
}

/// Names of the functions, for error messages and docs.
pub const FUNCTIONS: &[&str] = &[
    "has(name)",
    "min(a, b, ...)",
    "max(a, b, ...)",
    "floor(x)",
    "ceil(x)",
    "round(x)",
    "abs(x)",
    "round_down(x, step)",
    "round_up(x, step)",
    "pow2_floor(x)",
    "clamp(x, lo, hi)",
    "coalesce(a, b, ...)",
    "if(cond, then, else)",
    "contains(text, part)",
    "starts_with(text, prefix)",
    "divisor_at_most(n, k)",
];

#[derive(Clone, Debug, PartialEq)]
enum Node {
    Num(f64),
    Str(Arc<str>),
    Bool(bool),
    Name(String),
    Neg(Box<Node>),
    Not(Box<Node>),
    Bin(BinOp, Box<Node>, Box<Node>),
    Call(Func, Vec<Node>),
}

/// A parsed expression.
#[derive(Clone, Debug, PartialEq)]
pub struct Expr {
    root: Node,
    text: String,
}

impl Expr {
    /// Parses an expression.
    pub fn parse(text: &str) -> Result<Expr, ExprError> {
        let tokens = lex(text)?;
        if tokens.len() > MAX_TOKENS {
            return Err(ExprError {
                offset: 0,
                len: text.len().min(1),
                message: format!("expression is longer than {MAX_TOKENS} tokens"),
            });
        }
        let mut p = Parser {
            depth: 0,
            tokens,
            pos: 0,
            text_len: text.len(),
        };
        let root = p.or()?;
        if let Some(t) = p.peek() {
            return Err(ExprError {
                offset: t.offset,
                len: t.len,
                message: format!(
                    "unexpected `{}` after a complete expression",
                    &text[t.offset..t.offset + t.len]
                ),
            });
        }
        Ok(Expr {
            root,
            text: text.to_string(),
        })
    }

    /// The source text.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Evaluates against a scope.
    pub fn eval(&self, scope: &dyn Scope) -> Val {
        eval(&self.root, scope)
    }

    /// Every name the expression reads (facts and lets), in order of appearance.
    pub fn names(&self) -> Vec<&str> {
        let mut out = Vec::new();
        collect_names(&self.root, &mut out);
        out
    }

    /// If the whole expression is a single name, that name (used to pick a display unit).
    pub fn as_name(&self) -> Option<&str> {
        match &self.root {
            Node::Name(n) => Some(n),
            _ => None,
        }
    }
}

fn collect_names<'a>(n: &'a Node, out: &mut Vec<&'a str>) {
    match n {
        Node::Name(s) if !out.contains(&s.as_str()) => out.push(s),
        Node::Name(_) => {}
        Node::Neg(a) | Node::Not(a) => collect_names(a, out),
        Node::Bin(_, a, b) => {
            collect_names(a, out);
            collect_names(b, out);
        }
        Node::Call(_, args) => args.iter().for_each(|a| collect_names(a, out)),
        _ => {}
    }
}

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Num(f64),
    Str(String),
    Ident(String),
    Op(&'static str),
    LParen,
    RParen,
    Comma,
}

#[derive(Clone, Debug)]
struct Token {
    tok: Tok,
    offset: usize,
    len: usize,
}

fn lex(text: &str) -> Result<Vec<Token>, ExprError> {
    let b = text.as_bytes();
    let mut i = 0;
    let mut out = Vec::new();
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        let start = i;
        let tok = if c.is_ascii_digit()
            || (c == b'.' && b.get(i + 1).is_some_and(u8::is_ascii_digit))
        {
            while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'.' || b[i] == b'_') {
                i += 1;
            }
            if i < b.len()
                && (b[i] == b'e' || b[i] == b'E')
                && b.get(i + 1)
                    .is_some_and(|c| c.is_ascii_digit() || *c == b'-' || *c == b'+')
            {
                i += 2;
                while i < b.len() && b[i].is_ascii_digit() {
                    i += 1;
                }
            }
            let num_text: String = text[start..i].chars().filter(|c| *c != '_').collect();
            let mut v: f64 = num_text.parse().map_err(|_| ExprError {
                offset: start,
                len: i - start,
                message: format!("`{}` is not a number", &text[start..i]),
            })?;
            // Optional unit suffix directly attached: 2GiB, 90%.
            let ustart = i;
            if i < b.len() && b[i] == b'%' {
                i += 1;
                v /= 100.0;
            } else {
                while i < b.len() && b[i].is_ascii_alphabetic() {
                    i += 1;
                }
                if i > ustart {
                    let unit = &text[ustart..i];
                    let m = crate::facts::units::unit_multiplier(
                        unit,
                        crate::facts::units::SiBase::Decimal,
                    )
                    .ok_or_else(|| ExprError {
                        offset: ustart,
                        len: i - ustart,
                        message: format!(
                            "unknown unit `{unit}` (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB or %)"
                        ),
                    })?;
                    v *= m;
                }
            }
            Tok::Num(v)
        } else if c.is_ascii_alphabetic() || c == b'_' {
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b'.') {
                i += 1;
            }
            Tok::Ident(text[start..i].to_string())
        } else if c == b'\'' || c == b'"' {
            i += 1;
            while i < b.len() && b[i] != c {
                i += 1;
            }
            if i >= b.len() {
                return Err(ExprError {
                    offset: start,
                    len: text.len() - start,
                    message: "unterminated string".into(),
                });
            }
            i += 1;
            Tok::Str(text[start + 1..i - 1].to_string())
        } else {
            let two = text.get(i..i + 2).unwrap_or("");
            let (op, n): (&'static str, usize) = match two {
                "<=" => ("<=", 2),
                ">=" => (">=", 2),
                "==" => ("==", 2),
                "!=" => ("!=", 2),
                "&&" => ("and", 2),
                "||" => ("or", 2),
                _ => match c {
                    b'<' => ("<", 1),
                    b'>' => (">", 1),
                    b'+' => ("+", 1),
                    b'-' => ("-", 1),
                    b'*' => ("*", 1),
                    b'/' => ("/", 1),
                    b'%' => ("%", 1),
                    b'!' => ("not", 1),
                    b'(' => ("(", 1),
                    b')' => (")", 1),
                    b',' => (",", 1),
                    _ => {
                        let ch = text[i..].chars().next().unwrap_or('?');
                        return Err(ExprError {
                            offset: i,
                            len: ch.len_utf8(),
                            message: format!("unexpected character `{ch}`"),
                        });
                    }
                },
            };
            i += n;
            match op {
                "(" => Tok::LParen,
                ")" => Tok::RParen,
                "," => Tok::Comma,
                _ => Tok::Op(op),
            }
        };
        out.push(Token {
            tok,
            offset: start,
            len: i - start,
        });
    }
    Ok(out)
}

struct Parser {
    tokens: Vec<Token>,
    pos: usize,
    text_len: usize,
    /// Current nesting (parentheses, `not`, unary minus, call arguments).
    depth: u32,
}

/// Deepest nesting an expression may use. Parsing and evaluation recurse, so this (with
/// [`MAX_TOKENS`], which bounds left-deep chains like `1+1+...`) keeps a hostile rule file
/// from overflowing the stack.
const MAX_DEPTH: u32 = 64;
/// Longest expression, in tokens.
const MAX_TOKENS: usize = 4096;

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.pos)
    }

    fn is_op(&self, op: &str) -> bool {
        match self.peek() {
            Some(Token {
                tok: Tok::Op(o), ..
            }) => *o == op,
            Some(Token {
                tok: Tok::Ident(id),
                ..
            }) => id == op && matches!(op, "and" | "or" | "not"),
            _ => false,
        }
    }

    fn err_here(&self, message: impl Into<String>) -> ExprError {
        match self.peek() {
            Some(t) => ExprError {
                offset: t.offset,
                len: t.len.max(1),
                message: message.into(),
            },
            None => ExprError {
                offset: self.text_len,
                len: 0,
                message: message.into(),
            },
        }
    }

    fn enter(&mut self) -> Result<(), ExprError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.err_here(format!(
                "expression nested more than {MAX_DEPTH} levels deep"
            )));
        }
        Ok(())
    }

    fn or(&mut self) -> Result<Node, ExprError> {
        self.enter()?;
        let r = self.or_chain();
        self.depth -= 1;
        r
    }

    fn or_chain(&mut self) -> Result<Node, ExprError> {
        let mut left = self.and()?;
        while self.is_op("or") {
            self.pos += 1;
            let right = self.and()?;
            left = Node::Bin(BinOp::Or, Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    fn and(&mut self) -> Result<Node, ExprError> {
        let mut left = self.not()?;
        while self.is_op("and") {
            self.pos += 1;
            let right = self.not()?;
            left = Node::Bin(BinOp::And, Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    fn not(&mut self) -> Result<Node, ExprError> {
        if self.is_op("not") {
            self.pos += 1;
            self.enter()?;
            let inner = self.not();
            self.depth -= 1;
            return Ok(Node::Not(Box::new(inner?)));
        }
        self.compare()
    }

    fn compare(&mut self) -> Result<Node, ExprError> {
        let left = self.sum()?;
        let op = match self.peek() {
            Some(Token {
                tok: Tok::Op(o), ..
            }) => match *o {
                "<" => Some(BinOp::Lt),
                "<=" => Some(BinOp::Le),
                ">" => Some(BinOp::Gt),
                ">=" => Some(BinOp::Ge),
                "==" => Some(BinOp::Eq),
                "!=" => Some(BinOp::Ne),
                _ => None,
            },
            _ => None,
        };
        if let Some(op) = op {
            self.pos += 1;
            let right = self.sum()?;
            return Ok(Node::Bin(op, Box::new(left), Box::new(right)));
        }
        Ok(left)
    }

    fn sum(&mut self) -> Result<Node, ExprError> {
        let mut left = self.product()?;
        loop {
            let op = if self.is_op("+") {
                BinOp::Add
            } else if self.is_op("-") {
                BinOp::Sub
            } else {
                break;
            };
            self.pos += 1;
            let right = self.product()?;
            left = Node::Bin(op, Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    fn product(&mut self) -> Result<Node, ExprError> {
        let mut left = self.unary()?;
        loop {
            let op = if self.is_op("*") {
                BinOp::Mul
            } else if self.is_op("/") {
                BinOp::Div
            } else if self.is_op("%") {
                BinOp::Rem
            } else {
                break;
            };
            self.pos += 1;
            let right = self.unary()?;
            left = Node::Bin(op, Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    fn unary(&mut self) -> Result<Node, ExprError> {
        if self.is_op("-") {
            self.pos += 1;
            self.enter()?;
            let inner = self.unary();
            self.depth -= 1;
            return Ok(Node::Neg(Box::new(inner?)));
        }
        self.atom()
    }

    fn atom(&mut self) -> Result<Node, ExprError> {
        let Some(t) = self.peek().cloned() else {
            return Err(self.err_here("expression ends too early"));
        };
        self.pos += 1;
        match t.tok {
            Tok::Num(n) => Ok(Node::Num(n)),
            Tok::Str(s) => Ok(Node::Str(Arc::from(s))),
            Tok::LParen => {
                let inner = self.or()?;
                match self.peek() {
                    Some(Token {
                        tok: Tok::RParen, ..
                    }) => {
                        self.pos += 1;
                        Ok(inner)
                    }
                    _ => Err(self.err_here("expected `)`")),
                }
            }
            Tok::Ident(id) => match id.as_str() {
                "true" => Ok(Node::Bool(true)),
                "false" => Ok(Node::Bool(false)),
                "and" | "or" | "not" => Err(ExprError {
                    offset: t.offset,
                    len: t.len,
                    message: format!("`{id}` needs something on its left"),
                }),
                _ => {
                    if matches!(
                        self.peek(),
                        Some(Token {
                            tok: Tok::LParen,
                            ..
                        })
                    ) {
                        let func = Func::from_name(&id).ok_or_else(|| ExprError {
                            offset: t.offset,
                            len: t.len,
                            message: format!(
                                "unknown function `{id}` (known: {})",
                                FUNCTIONS.join(", ")
                            ),
                        })?;
                        self.pos += 1;
                        let mut args = Vec::new();
                        if !matches!(
                            self.peek(),
                            Some(Token {
                                tok: Tok::RParen,
                                ..
                            })
                        ) {
                            loop {
                                args.push(self.or()?);
                                match self.peek() {
                                    Some(Token {
                                        tok: Tok::Comma, ..
                                    }) => self.pos += 1,
                                    Some(Token {
                                        tok: Tok::RParen, ..
                                    }) => break,
                                    _ => {
                                        return Err(self
                                            .err_here("expected `,` or `)` in the argument list"));
                                    }
                                }
                            }
                        }
                        self.pos += 1;
                        let (lo, hi) = func.arity();
                        if args.len() < lo || args.len() > hi {
                            return Err(ExprError {
                                offset: t.offset,
                                len: t.len,
                                message: format!(
                                    "`{id}` takes {lo}{} arguments, got {}",
                                    if hi > lo { "+" } else { "" },
                                    args.len()
                                ),
                            });
                        }
                        if func == Func::Has && !matches!(args[0], Node::Name(_)) {
                            return Err(ExprError {
                                offset: t.offset,
                                len: t.len,
                                message: "`has` takes a fact name".into(),
                            });
                        }
                        Ok(Node::Call(func, args))
                    } else {
                        Ok(Node::Name(id))
                    }
                }
            },
            _ => Err(ExprError {
                offset: t.offset,
                len: t.len,
                message: "expected a value".into(),
            }),
        }
    }
}

fn num2(a: Val, b: Val, f: impl Fn(f64, f64) -> Val) -> Val {
    match (a, b) {
        (Val::Num(x), Val::Num(y)) => f(x, y),
        _ => Val::Missing,
    }
}

fn finite(v: f64) -> Val {
    if v.is_finite() {
        Val::Num(v)
    } else {
        Val::Missing
    }
}

fn eval(n: &Node, s: &dyn Scope) -> Val {
    match n {
        Node::Num(v) => Val::Num(*v),
        Node::Str(v) => Val::Str(v.clone()),
        Node::Bool(v) => Val::Bool(*v),
        Node::Name(name) => s.lookup(name),
        Node::Neg(a) => match eval(a, s) {
            Val::Num(x) => Val::Num(-x),
            _ => Val::Missing,
        },
        Node::Not(a) => match eval(a, s) {
            Val::Bool(b) => Val::Bool(!b),
            _ => Val::Missing,
        },
        Node::Bin(op, a, b) => {
            match op {
                // Kleene logic, short-circuiting where the answer is already decided.
                BinOp::And => {
                    let x = eval(a, s);
                    if x == Val::Bool(false) {
                        return Val::Bool(false);
                    }
                    let y = eval(b, s);
                    match (x, y) {
                        (_, Val::Bool(false)) => Val::Bool(false),
                        (Val::Bool(true), Val::Bool(true)) => Val::Bool(true),
                        _ => Val::Missing,
                    }
                }
                BinOp::Or => {
                    let x = eval(a, s);
                    if x == Val::Bool(true) {
                        return Val::Bool(true);
                    }
                    let y = eval(b, s);
                    match (x, y) {
                        (_, Val::Bool(true)) => Val::Bool(true),
                        (Val::Bool(false), Val::Bool(false)) => Val::Bool(false),
                        _ => Val::Missing,
                    }
                }
                BinOp::Eq | BinOp::Ne => {
                    let (x, y) = (eval(a, s), eval(b, s));
                    let eq = match (&x, &y) {
                        (Val::Missing, _) | (_, Val::Missing) => return Val::Missing,
                        (Val::Num(p), Val::Num(q)) => p == q,
                        (Val::Str(p), Val::Str(q)) => p == q,
                        (Val::Bool(p), Val::Bool(q)) => p == q,
                        _ => false,
                    };
                    Val::Bool(if *op == BinOp::Eq { eq } else { !eq })
                }
                BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => {
                    num2(eval(a, s), eval(b, s), |x, y| {
                        Val::Bool(match op {
                            BinOp::Lt => x < y,
                            BinOp::Le => x <= y,
                            BinOp::Gt => x > y,
                            _ => x >= y,
                        })
                    })
                }
                BinOp::Add => num2(eval(a, s), eval(b, s), |x, y| finite(x + y)),
                BinOp::Sub => num2(eval(a, s), eval(b, s), |x, y| finite(x - y)),
                BinOp::Mul => num2(eval(a, s), eval(b, s), |x, y| finite(x * y)),
                BinOp::Div => num2(eval(a, s), eval(b, s), |x, y| {
                    if y == 0.0 {
                        Val::Missing
                    } else {
                        finite(x / y)
                    }
                }),
                BinOp::Rem => num2(eval(a, s), eval(b, s), |x, y| {
                    if y == 0.0 {
                        Val::Missing
                    } else {
                        finite(x % y)
                    }
                }),
            }
        }
        Node::Call(f, args) => call(*f, args, s),
    }
}

fn call(f: Func, args: &[Node], s: &dyn Scope) -> Val {
    let num1 = |g: fn(f64) -> f64| match eval(&args[0], s) {
        Val::Num(x) => finite(g(x)),
        _ => Val::Missing,
    };
    match f {
        Func::Has => match &args[0] {
            Node::Name(n) => Val::Bool(s.lookup(n) != Val::Missing),
            _ => Val::Missing,
        },
        Func::Floor => num1(f64::floor),
        Func::Ceil => num1(f64::ceil),
        Func::Round => num1(f64::round),
        Func::Abs => num1(f64::abs),
        Func::Pow2Floor => num1(|x| {
            if x < 1.0 {
                1.0
            } else {
                2f64.powi(x.log2().floor() as i32)
            }
        }),
        Func::Min | Func::Max => {
            let mut acc: Option<f64> = None;
            for a in args {
                match eval(a, s) {
                    Val::Num(x) => {
                        acc = Some(match acc {
                            None => x,
                            Some(y) if f == Func::Min => y.min(x),
                            Some(y) => y.max(x),
                        })
                    }
                    _ => return Val::Missing,
                }
            }
            acc.map(Val::Num).unwrap_or(Val::Missing)
        }
        Func::RoundDown | Func::RoundUp => num2(eval(&args[0], s), eval(&args[1], s), |x, step| {
            if step <= 0.0 {
                return Val::Missing;
            }
            let q = x / step;
            finite(
                if f == Func::RoundDown {
                    q.floor()
                } else {
                    q.ceil()
                } * step,
            )
        }),
        // The largest whole divisor of `n` that is at most `k`: a smaller batch that splits
        // the old one evenly, so gradient accumulation can keep the effective batch exactly.
        Func::DivisorAtMost => num2(eval(&args[0], s), eval(&args[1], s), |n, k| {
            // Batch sizes are whole numbers; anything else has no meaningful divisor.
            if n < 1.0 || k < 1.0 || n.fract() != 0.0 || n > 1e12 {
                return Val::Missing;
            }
            let (n, k) = (n as u64, k.min(n).floor() as u64);
            // Divisors come in pairs (d, n / d) around the square root: at most 10^6 steps.
            let best = (1..)
                .take_while(|d| d * d <= n)
                .filter(|d| n % d == 0)
                .flat_map(|d| [d, n / d])
                .filter(|&d| d <= k)
                .max();
            best.map_or(Val::Missing, |d| Val::Num(d as f64))
        }),
        Func::Clamp => match (eval(&args[0], s), eval(&args[1], s), eval(&args[2], s)) {
            (Val::Num(x), Val::Num(lo), Val::Num(hi)) => Val::Num(x.max(lo).min(hi)),
            _ => Val::Missing,
        },
        Func::Coalesce => args
            .iter()
            .map(|a| eval(a, s))
            .find(|v| *v != Val::Missing)
            .unwrap_or(Val::Missing),
        Func::If => match eval(&args[0], s) {
            Val::Bool(true) => eval(&args[1], s),
            Val::Bool(false) => eval(&args[2], s),
            _ => Val::Missing,
        },
        Func::Contains | Func::StartsWith => match (eval(&args[0], s), eval(&args[1], s)) {
            (Val::Str(a), Val::Str(b)) => {
                let (a, b) = (a.to_ascii_lowercase(), b.to_ascii_lowercase());
                Val::Bool(if f == Func::Contains {
                    a.contains(&b)
                } else {
                    a.starts_with(&b)
                })
            }
            (Val::Missing, _) | (_, Val::Missing) => Val::Missing,
            _ => Val::Bool(false),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    struct Map(HashMap<&'static str, Val>);
    impl Scope for Map {
        fn lookup(&self, name: &str) -> Val {
            self.0.get(name).cloned().unwrap_or(Val::Missing)
        }
    }

    fn scope() -> Map {
        Map(HashMap::from([
            (
                "oom.requested_bytes",
                Val::Num(2.0 * 1024.0 * 1024.0 * 1024.0),
            ),
            (
                "oom.reserved_unallocated_bytes",
                Val::Num(3.0 * 1024.0 * 1024.0 * 1024.0),
            ),
            ("phase", Val::Str(Arc::from("model-load"))),
            ("torch.expandable_segments", Val::Bool(false)),
            ("kv", Val::Num(44560.0)),
        ]))
    }

    fn ev(text: &str) -> Val {
        Expr::parse(text).unwrap().eval(&scope())
    }

    #[test]
    fn arithmetic_and_units() {
        assert_eq!(ev("1 + 2 * 3"), Val::Num(7.0));
        assert_eq!(ev("(1 + 2) * 3"), Val::Num(9.0));
        assert_eq!(ev("2GiB"), Val::Num(2147483648.0));
        assert_eq!(ev("1.5GB"), Val::Num(1.5e9));
        assert_eq!(ev("90%"), Val::Num(0.9));
        assert_eq!(ev("-3 + 1"), Val::Num(-2.0));
        assert_eq!(ev("10 / 0"), Val::Missing);
        assert_eq!(ev("round_down(kv, 256)"), Val::Num(44544.0));
        assert_eq!(ev("pow2_floor(45)"), Val::Num(32.0));
        assert_eq!(ev("min(kv, 32768)"), Val::Num(32768.0));
        assert_eq!(ev("divisor_at_most(12, 5)"), Val::Num(4.0));
        assert_eq!(ev("divisor_at_most(1024, 821)"), Val::Num(512.0));
        assert_eq!(ev("divisor_at_most(96, 96)"), Val::Num(96.0));
        assert_eq!(ev("divisor_at_most(7, 5)"), Val::Num(1.0));
        assert_eq!(ev("divisor_at_most(7.5, 5)"), Val::Missing);
        assert_eq!(ev("divisor_at_most(0, 5)"), Val::Missing);
    }

    #[test]
    fn comparisons_and_logic() {
        assert!(ev("oom.reserved_unallocated_bytes >= oom.requested_bytes").is_true());
        assert!(ev("phase == 'model-load' and not torch.expandable_segments").is_true());
        assert!(ev("phase == \"model-load\" && !torch.expandable_segments").is_true());
        assert!(ev("has(kv) and not has(nothing)").is_true());
    }

    #[test]
    fn missing_facts_never_fire() {
        assert_eq!(ev("nothing > 1"), Val::Missing);
        assert_eq!(ev("not (nothing > 1)"), Val::Missing);
        assert_eq!(ev("nothing > 1 or kv > 1"), Val::Bool(true));
        assert_eq!(ev("nothing > 1 and kv > 1"), Val::Missing);
        assert_eq!(ev("nothing > 1 and kv < 1"), Val::Bool(false));
        assert_eq!(ev("coalesce(nothing, kv)"), Val::Num(44560.0));
        assert_eq!(ev("nothing + 1"), Val::Missing);
    }

    #[test]
    fn names_are_collected() {
        let e = Expr::parse("min(a.b, c) > a.b + has(d)").unwrap();
        assert_eq!(e.names(), vec!["a.b", "c", "d"]);
    }

    #[test]
    fn errors_point_at_the_problem() {
        let e = Expr::parse("a > > b").unwrap_err();
        assert_eq!(e.offset, 4);
        let e = Expr::parse("frobnicate(a)").unwrap_err();
        assert!(e.message.contains("unknown function"));
        let e = Expr::parse("2zebibytes").unwrap_err();
        assert!(e.message.contains("unknown unit"), "{e:?}");
        let e = Expr::parse("(a > 1").unwrap_err();
        assert!(e.message.contains("expected `)`"));
        assert!(Expr::parse("'open").is_err());
        assert!(Expr::parse("").is_err());
        assert!(Expr::parse("min()").is_err());
        // Found by fuzzing: deep nesting must be an error, not a stack overflow.
        assert!(Expr::parse(&format!("{}1{}", "(".repeat(100_000), ")".repeat(100_000))).is_err());
        assert!(Expr::parse(&"not ".repeat(100_000)).is_err());
        assert!(Expr::parse(&"-".repeat(100_000)).is_err());
        assert!(Expr::parse(&vec!["1"; 100_000].join("+")).is_err());
        assert!(Expr::parse(&format!("{}1{}", "(".repeat(60), ")".repeat(60))).is_ok());
    }
}
