//! ABI guard: the shipped headers (`include/hccl`, `include/acl`) and libhccl
//! (this crate) must describe the same C ABI.
//!
//! [`check_abi`] runs bindgen over `<hccl/hccl.h>` (which includes
//! `<acl/acl.h>`), `<hccl/hccl_ex.h>`, `<hccl/hccl_sym_win.h>` and
//! `<acl/acl_prof.h>`, and parses the generated Rust with syn; it parses this
//! crate's sources with syn as well, and compares, after reducing every type
//! to its primitive C shape (typedefs / type aliases resolved, `c_int` →
//! `i32`, `c_char` → the platform's `i8`/`u8`, `*const` and `*mut` kept
//! apart, structs and unions by their typedef name):
//!
//! - **functions**: every function a header declares is exported
//!   (`#[no_mangle] extern "C"`) with the same parameter count, parameter
//!   types and return type; every exported function is declared in a header
//!   (except [`EXPORTED_NOT_DECLARED`]); `static inline` helpers
//!   ([`HEADER_INLINE`]) are not required;
//! - **structs and unions**: the same fields in the same order with the same
//!   types, and the size, alignment and field offsets bindgen's layout
//!   assertions give equal the compiled `hccl::types::*` (`size_of`,
//!   `align_of`, `offset_of!`); an opaque (incomplete) C type
//!   (`aclprofConfig`, `aclprofAicoreEvents`) must be opaque in the
//!   library too (one `_unused: [u8; 0]` field, size 0, alignment 1);
//! - **typedefs**: every type alias in `types.rs` equals the header's typedef
//!   of that name;
//! - **enum values and constants**: `HcclResult`, `HcclDataType`,
//!   `HcclReduceOp` against the library's `from_code` decoders,
//!   `HcclSendRecvType` against the library's decoding of
//!   `HcclSendRecvItem::sendRecvType`, `HcclCommConfigCapability` against
//!   `HCCL_COMM_CONFIG_RESERVED` and `HcclGetCommConfigCapability()`,
//!   `aclprofAicoreMetrics` against the `ACL_AICORE_*` constants of
//!   `types.rs` that `aclprofCreateConfig` accepts (header values without
//!   one must be refused), and every `const` of `types.rs` (sizes, magic
//!   word, `ACL_*` codes, `ACL_PROF_*` flags, `ACL_AICORE_*` values)
//!   against the header's `#define` or enum value of the same name;
//!   conversely every `ACL_*` constant of the headers (the error codes of
//!   `acl_base.h`, the event and stream flags and every enum value of
//!   `acl_rt.h`, the `acl_prof.h` flags) must be a constant of `types.rs`,
//!   so none goes uncompared.
//!
//! Not compared: the values of `HcclConfig`, which the library uses as
//! bare numbers with no named constant to compare against (its typedef is
//! compared).
//!
//! All mismatches are collected and reported at once. The second test runs
//! the same comparison over a mutated copy of the include tree (a parameter
//! of `HcclAllReduce`, of `HcclBatchPut` and of `aclrtMapMem`, three struct fields
//! (one of the version-11 `HcclCommConfig`), an enum value, `ACL_*` defines
//! (a general and a runtime error code, an event flag), an `aclrtMemcpyKind`
//! value, a renamed `aclrtStreamStatus` value;
//! in `acl_prof.h` a parameter of `aclprofStart`, an `aclprofAicoreMetrics`
//! value, an `ACL_PROF_*` flag, and a definition given to the opaque
//! `aclprofAicoreEvents`) and checks that exactly those changes are
//! reported.

use quote::ToTokens;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use syn::visit::Visit;

/// What bindgen generates bindings for.
const ALLOWLIST: &str =
    "Hccl.*|hccl.*|HCCL_.*|acl.*|ACL_.*|COMM_NAME_MAX_LENGTH|UDI_MAX_LENGTH|BUFFER_NAME_MAX_LENGTH";

/// Functions the library exports although no header declares them (none).
const EXPORTED_NOT_DECLARED: &[&str] = &[];

/// `static inline` functions of the headers: compiled into the caller, never
/// exported (bindgen skips them; listed in case a bindgen option emits them).
const HEADER_INLINE: &[&str] = &["HcclCommConfigInit"];

/// Constants of `types.rs` with no `#define` of the same name:
/// `HCCL_CONFIG_NOT_SET` is the one "not set" value of the header's
/// `HCCL_COMM_*_CONFIG_NOT_SET` defines (checked against each of them).
const LIB_ONLY_CONSTS: &[&str] = &["HCCL_CONFIG_NOT_SET"];

/// Type aliases of `types.rs` that are not C typedefs (`Void`: Rust spelling
/// of `void` for pointer arguments).
const LIB_ONLY_ALIASES: &[&str] = &["Void"];

/// One disagreement between the headers and the library.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Mismatch {
    /// The function, struct, enum or constant.
    item: String,
    /// What differs (with the header's and the library's view).
    detail: String,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.item, self.detail)
    }
}

#[derive(Default)]
struct Mismatches(Vec<Mismatch>);

impl Mismatches {
    fn push(&mut self, item: impl Into<String>, detail: impl Into<String>) {
        self.0.push(Mismatch {
            item: item.into(),
            detail: detail.into(),
        });
    }
}

/// A function: parameter names and types, return type (`None` = `()`).
struct FnSig {
    params: Vec<(String, syn::Type)>,
    ret: Option<syn::Type>,
    /// `extern "C"`.
    c_abi: bool,
    /// Where it is defined (library) or "header".
    origin: String,
}

/// A struct or union.
struct Record {
    is_union: bool,
    repr_c: bool,
    fields: Vec<(String, syn::Type)>,
}

/// Size, alignment and field offsets.
#[derive(Default, Debug)]
struct Layout {
    size: Option<usize>,
    align: Option<usize>,
    offsets: BTreeMap<String, usize>,
}

/// A named integer constant: the name of its type (an enum's typedef for
/// enum constants) and its value.
struct Const {
    ty: String,
    value: Option<i128>,
}

/// One side of the comparison: the header (as bindgen renders it) or the
/// library (as its sources declare it).
#[derive(Default)]
struct Side {
    fns: BTreeMap<String, FnSig>,
    aliases: BTreeMap<String, syn::Type>,
    records: BTreeMap<String, Record>,
    consts: BTreeMap<String, Const>,
    /// Layout assertions (header side only), by record name.
    layouts: BTreeMap<String, Layout>,
    /// Record name → the typedef that names it (`HcclRootInfoDef` →
    /// `HcclRootInfo`).
    canon: BTreeMap<String, String>,
}

impl Side {
    /// Collects the items of bindgen's output.
    fn from_bindgen(file: &syn::File) -> Side {
        let mut side = Side::default();
        for item in &file.items {
            match item {
                syn::Item::ForeignMod(m) => {
                    let c_abi = abi_is_c(Some(&m.abi));
                    for fi in &m.items {
                        if let syn::ForeignItem::Fn(f) = fi {
                            side.fns
                                .insert(f.sig.ident.to_string(), sig(&f.sig, c_abi, "header"));
                        }
                    }
                }
                syn::Item::Type(_) | syn::Item::Struct(_) | syn::Item::Union(_) => {
                    side.add_type(item);
                }
                syn::Item::Const(c) if c.ident == "_" => parse_layout(&c.expr, &mut side.layouts),
                syn::Item::Const(c) => {
                    side.consts.insert(
                        c.ident.to_string(),
                        Const {
                            ty: type_name(&c.ty),
                            value: eval(&c.expr, &BTreeMap::new()),
                        },
                    );
                }
                _ => {}
            }
        }
        for (alias, target) in &side.aliases {
            if let Some(name) = bare_path(target) {
                if side.records.contains_key(&name) {
                    side.canon.insert(name, alias.clone());
                }
            }
        }
        side
    }

    /// Collects the library: exported functions of every file under `src`,
    /// type aliases, `#[repr(C)]` records and constants of `src/types.rs`.
    fn from_library(src: &Path, out: &mut Mismatches) -> (Side, LibSource) {
        let mut side = Side::default();
        let mut source = LibSource::default();
        let mut files = Vec::new();
        rust_files(src, &mut files);
        files.sort();
        for path in &files {
            let rel = path.strip_prefix(src).unwrap_or(path).display().to_string();
            let text = match std::fs::read_to_string(path) {
                Ok(t) => t,
                Err(e) => {
                    out.push(format!("ffi/src/{rel}"), format!("cannot read: {e}"));
                    continue;
                }
            };
            let file = match syn::parse_file(&text) {
                Ok(f) => f,
                Err(e) => {
                    out.push(format!("ffi/src/{rel}"), format!("cannot parse: {e}"));
                    continue;
                }
            };
            let mut v = LibVisitor {
                file: format!("ffi/src/{rel}"),
                side: &mut side,
                source: &mut source,
                out,
            };
            v.visit_file(&file);
            if rel == "types.rs" {
                source.types_rs_found = true;
                let mut raw_consts = Vec::new();
                for item in &file.items {
                    match item {
                        syn::Item::Const(c) => raw_consts.push(c.clone()),
                        other => side.add_type(other),
                    }
                }
                // Constants may name earlier (or later) constants: evaluate
                // until nothing changes.
                let mut values: BTreeMap<String, i128> = BTreeMap::new();
                for _ in 0..=raw_consts.len() {
                    for c in &raw_consts {
                        if let Some(v) = eval(&c.expr, &values) {
                            values.insert(c.ident.to_string(), v);
                        }
                    }
                }
                for c in &raw_consts {
                    let name = c.ident.to_string();
                    side.consts.insert(
                        name.clone(),
                        Const {
                            ty: type_name(&c.ty),
                            value: values.get(&name).copied(),
                        },
                    );
                }
            }
        }
        let names = std::mem::take(&mut source.send_recv_kind_names);
        for (variant, name) in names {
            match side.consts.get(&name).and_then(|c| c.value) {
                Some(v) => {
                    source.send_recv_kinds.insert(variant, v);
                }
                None => out.push(
                    format!("SendRecvKind::{variant}"),
                    format!("decoded from `{name}`, which is not a constant of ffi/src/types.rs"),
                ),
            }
        }
        (side, source)
    }

    /// Records a type alias, struct or union item (other items: ignored).
    fn add_type(&mut self, item: &syn::Item) {
        match item {
            syn::Item::Type(t) => {
                self.aliases.insert(t.ident.to_string(), (*t.ty).clone());
            }
            syn::Item::Struct(s) => {
                self.records
                    .insert(s.ident.to_string(), record(&s.attrs, &s.fields, false));
            }
            syn::Item::Union(u) => {
                let fields = syn::Fields::Named(u.fields.clone());
                self.records
                    .insert(u.ident.to_string(), record(&u.attrs, &fields, true));
            }
            _ => {}
        }
    }

    /// Integer constants by name (for array lengths).
    fn const_values(&self) -> BTreeMap<String, i128> {
        self.consts
            .iter()
            .filter_map(|(n, c)| c.value.map(|v| (n.clone(), v)))
            .collect()
    }

    /// The canonical name of a record.
    fn record_name(&self, name: &str) -> String {
        self.canon
            .get(name)
            .cloned()
            .unwrap_or_else(|| name.to_owned())
    }

    /// `ty` reduced to its primitive C shape.
    fn norm(&self, ty: &syn::Type) -> String {
        self.norm_depth(ty, &self.const_values(), 0)
    }

    fn norm_depth(&self, ty: &syn::Type, consts: &BTreeMap<String, i128>, depth: u32) -> String {
        if depth > 32 {
            return format!("<alias cycle at `{}`>", written(ty));
        }
        match ty {
            syn::Type::Ptr(p) => format!(
                "*{} {}",
                if p.mutability.is_some() {
                    "mut"
                } else {
                    "const"
                },
                self.norm_depth(&p.elem, consts, depth + 1)
            ),
            syn::Type::Array(a) => {
                let len = eval(&a.len, consts)
                    .map(|v| v.to_string())
                    .unwrap_or_else(|| written_expr(&a.len));
                format!("[{}; {len}]", self.norm_depth(&a.elem, consts, depth + 1))
            }
            syn::Type::Paren(p) => self.norm_depth(&p.elem, consts, depth + 1),
            syn::Type::Group(g) => self.norm_depth(&g.elem, consts, depth + 1),
            syn::Type::Tuple(t) if t.elems.is_empty() => "()".to_owned(),
            syn::Type::Never(_) => "!".to_owned(),
            // a C function pointer: `Option<unsafe extern "C" fn(..) -> R>`,
            // parameter names dropped, each type reduced
            syn::Type::Path(p) if p.path.segments.last().is_some_and(|s| s.ident == "Option") => {
                let inner = match &p.path.segments.last().expect("checked").arguments {
                    syn::PathArguments::AngleBracketed(a) => a.args.iter().find_map(|g| match g {
                        syn::GenericArgument::Type(t) => Some(t),
                        _ => None,
                    }),
                    _ => None,
                };
                match inner {
                    Some(t) => format!("Option<{}>", self.norm_depth(t, consts, depth + 1)),
                    None => written(ty),
                }
            }
            syn::Type::BareFn(f) => {
                let args: Vec<String> = f
                    .inputs
                    .iter()
                    .map(|a| self.norm_depth(&a.ty, consts, depth + 1))
                    .collect();
                let ret = match &f.output {
                    syn::ReturnType::Default => "()".to_owned(),
                    syn::ReturnType::Type(_, t) => self.norm_depth(t, consts, depth + 1),
                };
                format!(
                    "{}extern \"C\" fn({}) -> {ret}",
                    if f.unsafety.is_some() { "unsafe " } else { "" },
                    args.join(", ")
                )
            }
            syn::Type::Path(_) => match bare_path(ty) {
                Some(name) if self.records.contains_key(&name) => self.record_name(&name),
                Some(name) => match self.aliases.get(&name) {
                    Some(target) => self.norm_depth(target, consts, depth + 1),
                    None => primitive(&name),
                },
                None => written(ty),
            },
            other => written(other),
        }
    }

    /// The normalized return type (`()` for none).
    fn norm_ret(&self, ret: &Option<syn::Type>) -> String {
        ret.as_ref()
            .map_or_else(|| "()".to_owned(), |t| self.norm(t))
    }
}

/// What the library's sources say beyond the items of [`Side`].
#[derive(Default)]
struct LibSource {
    /// `HcclSendRecvItem::sendRecvType` decoding: `SendRecvKind` variant →
    /// the code the library maps to it.
    send_recv_kinds: BTreeMap<String, i128>,
    /// The same decoding written with named constants
    /// (`HCCL_SEND => SendRecvKind::Send`): variant → constant name,
    /// resolved against types.rs once every file is read.
    send_recv_kind_names: BTreeMap<String, String>,
    types_rs_found: bool,
}

struct LibVisitor<'a> {
    file: String,
    side: &'a mut Side,
    source: &'a mut LibSource,
    out: &'a mut Mismatches,
}

impl LibVisitor<'_> {
    fn exported(&mut self, attrs: &[syn::Attribute], s: &syn::Signature) {
        let Some(name) = export_name(attrs, &s.ident) else {
            return;
        };
        let f = sig(s, abi_is_c(s.abi.as_ref()), &self.file);
        if let Some(prev) = self.side.fns.insert(name.clone(), f) {
            self.out.push(
                name,
                format!("exported twice ({} and {})", prev.origin, self.file),
            );
        }
    }
}

impl<'ast> Visit<'ast> for LibVisitor<'_> {
    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if !is_cfg_test(&m.attrs) {
            syn::visit::visit_item_mod(self, m);
        }
    }

    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        self.exported(&f.attrs, &f.sig);
        syn::visit::visit_item_fn(self, f);
    }

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        self.exported(&f.attrs, &f.sig);
        syn::visit::visit_impl_item_fn(self, f);
    }

    fn visit_arm(&mut self, arm: &'ast syn::Arm) {
        // `0 => SendRecvKind::Send` or `HCCL_SEND => SendRecvKind::Send`:
        // how sendRecvType codes are decoded.
        if let syn::Expr::Path(p) = &*arm.body {
            let segs: Vec<String> = p
                .path
                .segments
                .iter()
                .map(|s| s.ident.to_string())
                .collect();
            if let [.., ty, variant] = segs.as_slice() {
                if ty == "SendRecvKind" {
                    match &arm.pat {
                        syn::Pat::Lit(lit) => {
                            if let Some(v) = eval(&syn::Expr::Lit(lit.clone()), &BTreeMap::new()) {
                                self.source.send_recv_kinds.insert(variant.clone(), v);
                            }
                        }
                        syn::Pat::Ident(id) => {
                            self.source
                                .send_recv_kind_names
                                .insert(variant.clone(), id.ident.to_string());
                        }
                        syn::Pat::Path(pp) => {
                            if let Some(last) = pp.path.segments.last() {
                                self.source
                                    .send_recv_kind_names
                                    .insert(variant.clone(), last.ident.to_string());
                            }
                        }
                        _ => {}
                    }
                }
            }
        }
        syn::visit::visit_arm(self, arm);
    }
}

/// The exported symbol name of a function with `#[no_mangle]`,
/// `#[unsafe(no_mangle)]` or `#[export_name = "..."]`.
fn export_name(attrs: &[syn::Attribute], ident: &syn::Ident) -> Option<String> {
    for a in attrs {
        if a.path().is_ident("no_mangle") {
            return Some(ident.to_string());
        }
        if a.path().is_ident("unsafe") {
            let inner = a.meta.to_token_stream().to_string();
            if inner.contains("no_mangle") {
                return Some(ident.to_string());
            }
        }
        if a.path().is_ident("export_name") {
            if let syn::Meta::NameValue(nv) = &a.meta {
                if let syn::Expr::Lit(syn::ExprLit {
                    lit: syn::Lit::Str(s),
                    ..
                }) = &nv.value
                {
                    return Some(s.value());
                }
            }
        }
    }
    None
}

fn is_cfg_test(attrs: &[syn::Attribute]) -> bool {
    attrs
        .iter()
        .any(|a| a.meta.to_token_stream().to_string().replace(' ', "") == "cfg(test)")
}

fn abi_is_c(abi: Option<&syn::Abi>) -> bool {
    match abi {
        Some(a) => a.name.as_ref().is_none_or(|n| n.value() == "C"),
        None => false,
    }
}

fn sig(s: &syn::Signature, c_abi: bool, origin: &str) -> FnSig {
    let params = s
        .inputs
        .iter()
        .map(|arg| match arg {
            syn::FnArg::Typed(pt) => (pt.pat.to_token_stream().to_string(), (*pt.ty).clone()),
            syn::FnArg::Receiver(r) => ("self".to_owned(), (*r.ty).clone()),
        })
        .collect();
    let ret = match &s.output {
        syn::ReturnType::Default => None,
        syn::ReturnType::Type(_, t) => Some((**t).clone()),
    };
    FnSig {
        params,
        ret,
        c_abi: c_abi && s.variadic.is_none(),
        origin: origin.to_owned(),
    }
}

fn record(attrs: &[syn::Attribute], fields: &syn::Fields, is_union: bool) -> Record {
    let repr_c = attrs.iter().any(|a| {
        a.path().is_ident("repr") && {
            let mut c = false;
            let _ = a.parse_nested_meta(|m| {
                c |= m.path.is_ident("C");
                Ok(())
            });
            c
        }
    });
    let fields = fields
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let name = f
                .ident
                .as_ref()
                .map_or_else(|| i.to_string(), |id| id.to_string());
            (name, f.ty.clone())
        })
        .collect();
    Record {
        is_union,
        repr_c,
        fields,
    }
}

/// Reads bindgen's `const _: () = { ["Size of X"][size_of::<X>() - 4usize]; ... };`.
fn parse_layout(expr: &syn::Expr, layouts: &mut BTreeMap<String, Layout>) {
    let syn::Expr::Block(b) = expr else { return };
    for stmt in &b.block.stmts {
        let syn::Stmt::Expr(syn::Expr::Index(ix), _) = stmt else {
            continue;
        };
        let syn::Expr::Array(arr) = &*ix.expr else {
            continue;
        };
        let Some(syn::Expr::Lit(syn::ExprLit {
            lit: syn::Lit::Str(label),
            ..
        })) = arr.elems.first()
        else {
            continue;
        };
        let syn::Expr::Binary(bin) = &*ix.index else {
            continue;
        };
        let Some(value) = eval(&bin.right, &BTreeMap::new()).and_then(|v| usize::try_from(v).ok())
        else {
            continue;
        };
        let label = label.value();
        if let Some(name) = label.strip_prefix("Size of ") {
            layouts.entry(name.trim().to_owned()).or_default().size = Some(value);
        } else if let Some(name) = label.strip_prefix("Alignment of ") {
            layouts.entry(name.trim().to_owned()).or_default().align = Some(value);
        } else if let Some(rest) = label.strip_prefix("Offset of field: ") {
            if let Some((name, field)) = rest.split_once("::") {
                layouts
                    .entry(name.trim().to_owned())
                    .or_default()
                    .offsets
                    .insert(field.trim().to_owned(), value);
            }
        }
    }
}

/// The value of an integer constant expression (literals, named constants,
/// casts, negation, parentheses, `+ - * << |`).
fn eval(expr: &syn::Expr, consts: &BTreeMap<String, i128>) -> Option<i128> {
    match expr {
        syn::Expr::Lit(syn::ExprLit {
            lit: syn::Lit::Int(i),
            ..
        }) => i.base10_parse::<i128>().ok(),
        syn::Expr::Path(p) => consts
            .get(&p.path.segments.last()?.ident.to_string())
            .copied(),
        syn::Expr::Cast(c) => eval(&c.expr, consts),
        syn::Expr::Paren(p) => eval(&p.expr, consts),
        syn::Expr::Group(g) => eval(&g.expr, consts),
        syn::Expr::Unary(syn::ExprUnary {
            op: syn::UnOp::Neg(_),
            expr,
            ..
        }) => eval(expr, consts).map(|v| -v),
        syn::Expr::Binary(b) => {
            let (l, r) = (eval(&b.left, consts)?, eval(&b.right, consts)?);
            match b.op {
                syn::BinOp::Add(_) => l.checked_add(r),
                syn::BinOp::Sub(_) => l.checked_sub(r),
                syn::BinOp::Mul(_) => l.checked_mul(r),
                syn::BinOp::Shl(_) => l.checked_shl(u32::try_from(r).ok()?),
                syn::BinOp::BitOr(_) => Some(l | r),
                _ => None,
            }
        }
        _ => None,
    }
}

/// The last identifier of a plain path type (`::std::os::raw::c_int` →
/// `c_int`), if `ty` is one.
fn bare_path(ty: &syn::Type) -> Option<String> {
    match ty {
        syn::Type::Path(p) if p.qself.is_none() => {
            let last = p.path.segments.last()?;
            matches!(last.arguments, syn::PathArguments::None).then(|| last.ident.to_string())
        }
        syn::Type::Paren(p) => bare_path(&p.elem),
        syn::Type::Group(g) => bare_path(&g.elem),
        _ => None,
    }
}

fn type_name(ty: &syn::Type) -> String {
    bare_path(ty).unwrap_or_else(|| written(ty))
}

/// Rust's C type aliases as the primitive they are on this platform.
fn primitive(name: &str) -> String {
    use std::ffi::{c_char, c_long};
    let signed_char = c_char::MIN != 0;
    let long_bits = 8 * std::mem::size_of::<c_long>();
    match name {
        "c_char" if signed_char => "i8".to_owned(),
        "c_char" => "u8".to_owned(),
        "c_schar" => "i8".to_owned(),
        "c_uchar" => "u8".to_owned(),
        "c_short" => "i16".to_owned(),
        "c_ushort" => "u16".to_owned(),
        "c_int" => "i32".to_owned(),
        "c_uint" => "u32".to_owned(),
        "c_long" => format!("i{long_bits}"),
        "c_ulong" => format!("u{long_bits}"),
        "c_longlong" => "i64".to_owned(),
        "c_ulonglong" => "u64".to_owned(),
        "c_float" => "f32".to_owned(),
        "c_double" => "f64".to_owned(),
        other => other.to_owned(),
    }
}

/// A type as written, without the `::std::os::raw::` noise.
fn written(ty: &syn::Type) -> String {
    tidy(ty.to_token_stream().to_string())
}

fn written_expr(e: &syn::Expr) -> String {
    tidy(e.to_token_stream().to_string())
}

/// Token spacing (`* mut :: std :: os :: raw :: c_void`) to Rust spelling
/// (`*mut c_void`).
fn tidy(s: String) -> String {
    s.replace(":: std :: os :: raw :: ", "")
        .replace(":: std :: ffi :: ", "")
        .replace("std :: ffi :: ", "")
        .replace(" :: ", "::")
        .replace("* mut ", "*mut ")
        .replace("* const ", "*const ")
        .replace(" ;", ";")
}

/// "`u32`" or "`*mut c_void` (written `HcclComm`)".
fn shown(norm: &str, ty: Option<&syn::Type>) -> String {
    match ty.map(written) {
        Some(w) if w != norm => format!("`{norm}` (written `{w}`)"),
        _ => format!("`{norm}`"),
    }
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// `EOpenFileFailure` → `E_OPEN_FILE_FAILURE`.
fn upper_snake(camel: &str) -> String {
    let mut s = String::new();
    for (i, ch) in camel.chars().enumerate() {
        if ch.is_ascii_uppercase() && i > 0 {
            s.push('_');
        }
        s.push(ch.to_ascii_uppercase());
    }
    s
}

/// The headers: the workspace's `include/`, which `ffi/include` links to
/// so that the packaged crate carries them too.
fn include_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("include")
}

/// libclang is loaded once per process; one bindgen run at a time.
static BINDGEN: Mutex<()> = Mutex::new(());

/// bindgen's view of the HCCL headers under `include`.
fn run_bindgen(include: &Path) -> Result<syn::File, String> {
    let _one = BINDGEN.lock().unwrap_or_else(|e| e.into_inner());
    let bindings = bindgen::Builder::default()
        .header_contents(
            "abi_guard_wrapper.h",
            "#include <hccl/hccl.h>\n#include <hccl/hccl_ex.h>\n#include <hccl/hccl_sym_win.h>\n#include <acl/acl_prof.h>\n",
        )
        .clang_arg(format!("-I{}", include.display()))
        .layout_tests(true)
        .prepend_enum_name(false)
        .generate_comments(false)
        .allowlist_function(ALLOWLIST)
        .allowlist_type(ALLOWLIST)
        .allowlist_var(ALLOWLIST)
        .generate()
        .map_err(|e| format!("bindgen failed on {}: {e}", include.display()))?;
    syn::parse_file(&bindings.to_string())
        .map_err(|e| format!("bindgen output does not parse: {e}"))
}

/// The compiled layout of the library's C structs and unions.
fn library_layouts() -> BTreeMap<String, Layout> {
    use hccl::types;
    use std::mem::{align_of, offset_of, size_of};
    macro_rules! layout {
        ($t:ident: $($f:ident),+ $(,)?) => {
            (
                stringify!($t).to_owned(),
                Layout {
                    size: Some(size_of::<types::$t>()),
                    align: Some(align_of::<types::$t>()),
                    offsets: [$((stringify!($f).to_owned(), offset_of!(types::$t, $f))),+]
                        .into_iter()
                        .collect(),
                },
            )
        };
    }
    [
        layout!(HcclRootInfo: internal),
        layout!(
            HcclCommConfig: reserved,
            hcclBufferSize,
            hcclDeterministic,
            hcclCommName,
            hcclUdi,
            hcclOpExpansionMode,
            hcclRdmaTrafficClass,
            hcclRdmaServiceLevel,
            hcclWorldRankID,
            hcclJobID,
            aclGraphZeroCopyEnable,
            hcclExecTimeOut,
            hcclAlgo,
            hcclRetryEnable,
            hcclRetryParams,
            hcclBufferName,
            hcclQos,
            hcclSymWinMaxMemSizePerRank,
            hcclChannelSqDepth,
        ),
        layout!(HcclOneSideOpDesc: localAddr, remoteAddr, count, dataType),
        layout!(aclrtMemLocation: id, type_),
        layout!(
            aclrtPhysicalMemProp: handleType,
            allocationType,
            memAttr,
            location,
            reserve,
        ),
        layout!(HcclSendRecvItem: sendRecvType, buf, count, dataType, remoteRank),
        layout!(HcclConfigValue: value),
    ]
    .into_iter()
    .collect()
}

/// The compiled size and alignment of the library's opaque C types
/// (incomplete in the headers).
fn library_opaque() -> BTreeMap<String, (usize, usize)> {
    use hccl::types;
    use std::mem::{align_of, size_of};
    macro_rules! opaque {
        ($($t:ident),+ $(,)?) => {
            [$((stringify!($t).to_owned(), (size_of::<types::$t>(), align_of::<types::$t>()))),+]
                .into_iter()
                .collect()
        };
    }
    opaque!(aclprofConfig, aclprofAicoreEvents)
}

/// Whether bindgen rendered a record as opaque: `typedef struct X X;`
/// with no definition becomes `struct X { _unused: [u8; 0] }`.
fn is_opaque(r: &Record) -> bool {
    let zero_bytes = |t: &syn::Type| match t {
        syn::Type::Array(a) => {
            bare_path(&a.elem).as_deref() == Some("u8") && eval(&a.len, &BTreeMap::new()) == Some(0)
        }
        _ => false,
    };
    matches!(r.fields.as_slice(), [(n, t)] if n == "_unused" && zero_bytes(t))
}

/// Compiled values of the library's constants (cross-checks the values read
/// from `types.rs` and catches a constant the source reader misreads).
fn library_consts() -> Vec<(&'static str, i128)> {
    use hccl::types;
    macro_rules! consts {
        ($($n:ident),+ $(,)?) => { vec![$((stringify!($n), types::$n as i128)),+] };
    }
    let mut v = consts![
        HCCL_ROOT_INFO_BYTES,
        COMM_NAME_MAX_LENGTH,
        UDI_MAX_LENGTH,
        HCCL_COMM_CONFIG_INFO_BYTES,
        HCCL_COMM_CONFIG_MAGIC_WORD,
        HCCL_COMM_CONFIG_RESERVED,
        HCCL_COMM_CONFIG_VERSION,
        BUFFER_NAME_MAX_LENGTH,
        HCCL_COMM_ALGO_MAX_LENGTH,
        HCCL_COMM_RETRY_ENABLE_MAX_LENGTH,
        HCCL_COMM_RETRY_PARAMS_MAX_LENGTH,
        HCCL_COMM_EXECTIMEOUT_CONFIG_NOT_SET,
        HCCL_DEFAULT_SYMMETRIC_MEMORY_STRIDE,
        HCCL_COMM_STATUS_READY,
        HCCL_COMM_STATUS_SUSPENDING,
        HCCL_COMM_STATUS_INVALID,
        HCCL_COMM_STATE_PHASE_DESTROY_PRE,
        HCCL_COMM_STATE_PHASE_DESTROY_POST,
        HCCL_COMM_STATE_PHASE_RESUME_PRE,
        HCCL_COMM_STATE_PHASE_RESUME_POST,
        HCCL_OP_EXPANSION_MODE_HOST,
        HCCL_CONFIG_TYPE_OP_EXPANSION_MODE,
        ACL_ERROR_RT_PARAM_INVALID,
        ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID,
        ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        ACL_ERROR_RT_MEMORY_ALLOCATION,
        ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED,
        ACL_ERROR_RT_CCU_EXCEPTION,
        ACL_ERROR_INVALID_BUNDLE_MODEL_ID,
        ACL_ERROR_PROFILING_FAILURE,
        ACL_EVENT_SYNC,
        ACL_EVENT_CAPTURE_STREAM_PROGRESS,
        ACL_EVENT_TIME_LINE,
        ACL_EVENT_DEVICE_USE_ONLY,
        ACL_EVENT_EXTERNAL,
        ACL_EVENT_IPC,
        ACL_STREAM_FAST_LAUNCH,
        ACL_STREAM_CPU_SCHEDULE,
        ACL_STREAM_DEVICE_USE_ONLY,
        ACL_EVENT_RECORDED_STATUS_NOT_READY,
        ACL_EVENT_RECORDED_STATUS_COMPLETE,
        ACL_EVENT_WAIT_STATUS_RESERVED,
        ACL_STREAM_STATUS_RESERVED,
        ACL_MEMCPY_INTER_DEVICE_TO_DEVICE,
        ACL_MEM_MALLOC_HUGE1G_ONLY_P2P,
        ACL_MEM_ACCESS_USER_SPACE_READONLY,
        ACL_MEM_P2P_HUGE1G,
        ACL_RT_MEM_ALLOC_GRANULARITY_UNDEF,
        ACL_RT_OVERFLOW_MODE_SATURATION,
        ACL_RT_OVERFLOW_MODE_INFNAN,
        ACL_RT_OVERFLOW_MODE_UNDEF,
        ACL_CONTINUE_ON_FAILURE,
        ACL_STOP_ON_FAILURE,
        ACL_DDR_MEM,
        ACL_HBM_MEM_P2P_HUGE1G,
        ACL_MEM_LOCATION_TYPE_HOST,
        ACL_MEM_LOCATION_TYPE_DEVICE,
        ACL_MEM_ALLOCATION_TYPE_PINNED,
        ACL_MEM_HANDLE_TYPE_NONE,
        ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM,
        ACL_RT_MEM_ALLOC_GRANULARITY_RECOMMENDED,
        ACL_ERROR_API_NOT_SUPPORT,
        ACL_ERROR_MEMORY_ADDRESS_UNALIGNED,
        ACL_ERROR_FEATURE_UNSUPPORTED,
        ACL_SUCCESS,
        ACL_ERROR_INVALID_PARAM,
        ACL_ERROR_UNINITIALIZE,
        ACL_ERROR_REPEAT_INITIALIZE,
        ACL_ERROR_REPEAT_FINALIZE,
        ACL_ERROR_BAD_ALLOC,
        ACL_ERROR_INVALID_DEVICE,
        ACL_ERROR_INVALID_RESOURCE_HANDLE,
        ACL_ERROR_INTERNAL_ERROR,
        ACL_ERROR_RT_FAILURE,
        ACL_ERROR_WRITE_FILE,
        ACL_ERROR_PROF_ALREADY_RUN,
        ACL_ERROR_PROF_NOT_RUN,
        ACL_PROF_ACL_API,
        ACL_PROF_TASK_TIME,
        ACL_PROF_AICORE_METRICS,
        ACL_PROF_AICPU,
        ACL_PROF_L2CACHE,
        ACL_PROF_HCCL_TRACE,
        ACL_PROF_TRAINING_TRACE,
        ACL_PROF_MSPROFTX,
        ACL_PROF_RUNTIME_API,
        ACL_PROF_GE_API_L0,
        ACL_PROF_TASK_TIME_L0,
        ACL_PROF_TASK_MEMORY,
        ACL_PROF_GE_API_L1,
        ACL_PROF_TASK_TIME_L2,
        ACL_PROF_OP_ATTR,
        ACL_PROF_TASK_TIME_L3,
        ACL_AICORE_ARITHMETIC_UTILIZATION,
        ACL_AICORE_PIPE_UTILIZATION,
        ACL_AICORE_MEMORY_BANDWIDTH,
        ACL_AICORE_L0B_AND_WIDTH,
        ACL_AICORE_RESOURCE_CONFLICT_RATIO,
        ACL_AICORE_MEMORY_UB,
        ACL_AICORE_L2_CACHE,
        ACL_AICORE_PIPE_EXECUTE_UTILIZATION,
        ACL_AICORE_MEMORY_ACCESS,
        ACL_AICORE_NONE,
    ];
    // The root-info size the bootstrap actually uses.
    v.push((
        "HCCL_ROOT_INFO_BYTES",
        hccl_adapter::HCCL_ROOT_INFO_BYTES as i128,
    ));
    v
}

/// Compares the headers under `include` with this crate; returns every
/// mismatch (empty = header and library agree).
fn check_abi(include: &Path) -> Vec<Mismatch> {
    let mut out = Mismatches::default();
    let header = match run_bindgen(include) {
        Ok(file) => Side::from_bindgen(&file),
        Err(e) => {
            out.push("headers", e);
            return out.0;
        }
    };
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let (lib, source) = Side::from_library(&src, &mut out);
    if !source.types_rs_found {
        out.push("ffi/src/types.rs", "not found: no C types to compare");
    }
    check_functions(&header, &lib, &mut out);
    check_records(&header, &lib, &mut out);
    check_aliases(&header, &lib, &mut out);
    check_enums(&header, &lib, &source, &mut out);
    check_consts(&header, &lib, &mut out);
    let mut v = out.0;
    v.sort();
    v.dedup();
    v
}

fn check_functions(header: &Side, lib: &Side, out: &mut Mismatches) {
    if header.fns.is_empty() {
        out.push(
            "headers",
            "bindgen produced no functions (allowlist or include path?)",
        );
    }
    if lib.fns.is_empty() {
        out.push("library", "no #[no_mangle] functions found under ffi/src");
    }
    for (name, h) in &header.fns {
        if HEADER_INLINE.contains(&name.as_str()) {
            continue;
        }
        let Some(l) = lib.fns.get(name) else {
            out.push(name, "declared in a header but not exported by the library");
            continue;
        };
        if !l.c_abi {
            out.push(
                name,
                format!("exported from {} without extern \"C\"", l.origin),
            );
        }
        if h.params.len() != l.params.len() {
            let list = |s: &Side, f: &FnSig| {
                f.params
                    .iter()
                    .map(|(n, t)| format!("{n}: {}", s.norm(t)))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            out.push(
                name,
                format!(
                    "header has {} parameter(s) ({}), library ({}) has {} ({})",
                    h.params.len(),
                    list(header, h),
                    l.origin,
                    l.params.len(),
                    list(lib, l)
                ),
            );
        } else {
            for (i, ((hn, ht), (ln, lt))) in h.params.iter().zip(&l.params).enumerate() {
                let (hs, ls) = (header.norm(ht), lib.norm(lt));
                if hs != ls {
                    let pname = if hn == ln {
                        format!("`{hn}`")
                    } else {
                        format!("`{hn}` (library `{ln}`)")
                    };
                    out.push(
                        name,
                        format!(
                            "parameter {i} {pname}: header {}, library {}",
                            shown(&hs, Some(ht)),
                            shown(&ls, Some(lt))
                        ),
                    );
                }
            }
        }
        let (hr, lr) = (header.norm_ret(&h.ret), lib.norm_ret(&l.ret));
        if hr != lr {
            out.push(
                name,
                format!(
                    "return type: header {}, library {}",
                    shown(&hr, h.ret.as_ref()),
                    shown(&lr, l.ret.as_ref())
                ),
            );
        }
    }
    for (name, l) in &lib.fns {
        if !header.fns.contains_key(name) && !EXPORTED_NOT_DECLARED.contains(&name.as_str()) {
            out.push(
                name,
                format!(
                    "exported by the library ({}) but declared in no header",
                    l.origin
                ),
            );
        }
    }
}

fn check_records(header: &Side, lib: &Side, out: &mut Mismatches) {
    let lib_layouts = library_layouts();
    let header_layouts: BTreeMap<String, &Layout> = header
        .layouts
        .iter()
        .map(|(n, l)| (header.record_name(n), l))
        .collect();
    let mut seen = BTreeSet::new();
    for (raw, h) in &header.records {
        let name = header.record_name(raw);
        seen.insert(name.clone());
        let kind = |u: bool| if u { "union" } else { "struct" };
        let Some(l) = lib.records.get(&name) else {
            out.push(
                &name,
                format!(
                    "{} declared in a header, not defined in ffi/src/types.rs",
                    kind(h.is_union)
                ),
            );
            continue;
        };
        if h.is_union != l.is_union {
            out.push(
                &name,
                format!(
                    "header: {}, library: {}",
                    kind(h.is_union),
                    kind(l.is_union)
                ),
            );
        }
        if !l.repr_c {
            out.push(&name, "library type is not #[repr(C)]");
        }
        if h.fields.len() != l.fields.len() {
            let names = |r: &Record| {
                r.fields
                    .iter()
                    .map(|(n, _)| n.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            out.push(
                &name,
                format!(
                    "header has {} field(s) ({}), library {} ({})",
                    h.fields.len(),
                    names(h),
                    l.fields.len(),
                    names(l)
                ),
            );
        }
        for (i, ((hn, ht), (ln, lt))) in h.fields.iter().zip(&l.fields).enumerate() {
            if hn != ln {
                out.push(&name, format!("field {i}: header `{hn}`, library `{ln}`"));
            }
            let (hs, ls) = (header.norm(ht), lib.norm(lt));
            if hs != ls {
                out.push(
                    &name,
                    format!(
                        "field {i} `{hn}`: header {}, library {}",
                        shown(&hs, Some(ht)),
                        shown(&ls, Some(lt))
                    ),
                );
            }
        }
        // An opaque (incomplete) C type: bindgen gives it one zero-sized
        // `_unused` field and no layout; the library's must be zero-sized
        // too (only pointers to it cross the ABI).
        if is_opaque(h) {
            match library_opaque().get(&name) {
                Some(&(0, 1)) => {}
                Some((size, align)) => out.push(
                    &name,
                    format!(
                        "opaque in the header, but the library's type has size {size} and \
                         alignment {align} (want 0 and 1)"
                    ),
                ),
                None => out.push(
                    &name,
                    "opaque in the header: add it to the guard's library_opaque() table",
                ),
            }
            continue;
        }
        // Layout: bindgen's assertions vs the compiled library type.
        let Some(hl) = header_layouts.get(&name) else {
            out.push(&name, "bindgen emitted no layout assertions");
            continue;
        };
        let Some(ll) = lib_layouts.get(&name) else {
            out.push(
                &name,
                "not in the guard's library_layouts() table: add it so its layout is checked",
            );
            continue;
        };
        let fmt_opt = |v: Option<usize>| v.map_or_else(|| "?".to_owned(), |v| v.to_string());
        if hl.size != ll.size {
            out.push(
                &name,
                format!(
                    "size: header {}, library {}",
                    fmt_opt(hl.size),
                    fmt_opt(ll.size)
                ),
            );
        }
        if hl.align != ll.align {
            out.push(
                &name,
                format!(
                    "alignment: header {}, library {}",
                    fmt_opt(hl.align),
                    fmt_opt(ll.align)
                ),
            );
        }
        for (field, off) in &hl.offsets {
            match ll.offsets.get(field) {
                Some(lo) if lo == off => {}
                Some(lo) => out.push(
                    &name,
                    format!("offset of `{field}`: header {off}, library {lo}"),
                ),
                None => out.push(
                    &name,
                    format!("offset of `{field}`: header {off}, library has no such field"),
                ),
            }
        }
    }
    for (name, l) in &lib.records {
        if l.repr_c && !seen.contains(name) {
            out.push(
                name,
                "#[repr(C)] type in ffi/src/types.rs that no header declares",
            );
        }
    }
}

fn check_aliases(header: &Side, lib: &Side, out: &mut Mismatches) {
    for (name, lt) in &lib.aliases {
        if LIB_ONLY_ALIASES.contains(&name.as_str()) {
            continue;
        }
        let ls = lib.norm(lt);
        match header.aliases.get(name) {
            Some(ht) => {
                let hs = header.norm(ht);
                if hs != ls {
                    out.push(
                        name,
                        format!(
                            "typedef: header {}, library {}",
                            shown(&hs, Some(ht)),
                            shown(&ls, Some(lt))
                        ),
                    );
                }
            }
            None => out.push(
                name,
                format!("type alias in ffi/src/types.rs (`{ls}`) that no header declares"),
            ),
        }
    }
}

/// One enum: `lib` maps the C constant name the library's variant must have
/// to the code the library gives it; `decode` says what the library makes of
/// a code (None: rejected).
fn check_enum(
    header: &Side,
    enum_name: &str,
    lib: &BTreeMap<String, i128>,
    decode: &dyn Fn(i128) -> Option<String>,
    out: &mut Mismatches,
) {
    let declared: BTreeMap<&String, Option<i128>> = header
        .consts
        .iter()
        .filter(|(_, c)| c.ty == enum_name)
        .map(|(n, c)| (n, c.value))
        .collect();
    if declared.is_empty() {
        out.push(enum_name, "the headers declare no constants of this enum");
        return;
    }
    if lib.is_empty() {
        out.push(enum_name, "the library decodes no value of this enum");
    }
    for (cname, &code) in lib {
        match declared.get(cname) {
            None => out.push(
                enum_name,
                format!("library value `{cname}` = {code} has no header constant"),
            ),
            Some(&Some(h)) if h == code => {}
            Some(h) => out.push(
                enum_name,
                format!(
                    "`{cname}`: header {}, library {code}",
                    h.map_or_else(|| "?".to_owned(), |v| v.to_string())
                ),
            ),
        }
    }
    for (cname, value) in &declared {
        if lib.contains_key(*cname) {
            continue;
        }
        // Declared only in the header (RESERVED, INT128): the library must
        // reject the code rather than read it as something else.
        match value {
            Some(v) => {
                if let Some(what) = decode(*v) {
                    out.push(
                        enum_name,
                        format!("header `{cname}` = {v}, but the library decodes {v} as {what}"),
                    );
                }
            }
            None => out.push(enum_name, format!("header `{cname}`: value not readable")),
        }
    }
}

fn check_enums(header: &Side, lib: &Side, source: &LibSource, out: &mut Mismatches) {
    use hccl_adapter::{DataType, HcclResult, ReduceOp};
    // Codes to ask the library's decoders about: a generous range plus every
    // value the headers declare.
    let probes: BTreeSet<u32> = (0..=1024u32)
        .chain(
            header
                .consts
                .values()
                .filter_map(|c| c.value.and_then(|v| u32::try_from(v).ok())),
        )
        .collect();
    let code = |v: i128| u32::try_from(v).ok();

    let results: BTreeMap<String, i128> = probes
        .iter()
        .filter_map(|&c| HcclResult::from_code(c))
        .map(|r| {
            (
                format!("HCCL_{}", upper_snake(&format!("{r:?}"))),
                r.code().into(),
            )
        })
        .collect();
    check_enum(
        header,
        "HcclResult",
        &results,
        &|v| {
            code(v)
                .and_then(HcclResult::from_code)
                .map(|r| format!("{r:?}"))
        },
        out,
    );

    // the library's own spelling of HCCL's names (BFP16, FP8E4M3, ...),
    // checked against the header's both ways
    let dtypes: BTreeMap<String, i128> = probes
        .iter()
        .filter_map(|&c| DataType::from_code(c).ok())
        .map(|d| (d.hccl_name().to_owned(), d.code().into()))
        .collect();
    check_enum(
        header,
        "HcclDataType",
        &dtypes,
        &|v| {
            code(v)
                .and_then(|c| DataType::from_code(c).ok())
                .map(|d| format!("{d:?}"))
        },
        out,
    );

    let ops: BTreeMap<String, i128> = probes
        .iter()
        .filter_map(|&c| ReduceOp::from_code(c).ok())
        .map(|o| {
            (
                format!("HCCL_REDUCE_{}", upper_snake(&format!("{o:?}"))),
                o.code().into(),
            )
        })
        .collect();
    check_enum(
        header,
        "HcclReduceOp",
        &ops,
        &|v| {
            code(v)
                .and_then(|c| ReduceOp::from_code(c).ok())
                .map(|o| format!("{o:?}"))
        },
        out,
    );

    let kinds: BTreeMap<String, i128> = source
        .send_recv_kinds
        .iter()
        .map(|(k, &v)| (format!("HCCL_{}", upper_snake(k)), v))
        .collect();
    check_enum(
        header,
        "HcclSendRecvType",
        &kinds,
        &|v| {
            source
                .send_recv_kinds
                .iter()
                .find(|(_, &c)| c == v)
                .map(|(k, _)| format!("SendRecvKind::{k}"))
        },
        out,
    );

    // HcclCommConfigCapability: the library's end marker and what
    // HcclGetCommConfigCapability() reports must be header values.
    let reserved = hccl::types::HCCL_COMM_CONFIG_RESERVED;
    let caps: BTreeMap<String, i128> =
        [("HCCL_COMM_CONFIG_RESERVED".to_owned(), reserved.into())].into();
    check_enum(
        header,
        "HcclCommConfigCapability",
        &caps,
        &|v| (v > reserved.into()).then(|| "beyond HCCL_COMM_CONFIG_RESERVED".to_owned()),
        out,
    );
    let reported = i128::from(hccl::hccl::HcclGetCommConfigCapability());
    let known = header
        .consts
        .iter()
        .any(|(_, c)| c.ty == "HcclCommConfigCapability" && c.value == Some(reported));
    if !known {
        out.push(
            "HcclGetCommConfigCapability",
            format!("returns {reported}, which is no HcclCommConfigCapability of the header"),
        );
    }

    // aclprofAicoreMetrics: the constants of types.rs that
    // aclprofCreateConfig accepts (a library constant it refuses is a
    // mismatch of its own); a header value without one must be refused.
    let accepts = |v: i128| {
        let Ok(m) = u32::try_from(v) else {
            return false;
        };
        let mut dev = [0u32];
        let cfg = hccl::acl::aclprofCreateConfig(dev.as_mut_ptr(), 1, m, std::ptr::null(), 0);
        if cfg.is_null() {
            return false;
        }
        hccl::acl::aclprofDestroyConfig(cfg);
        true
    };
    let mut metrics = BTreeMap::new();
    for (name, c) in &lib.consts {
        if c.ty != "aclprofAicoreMetrics" {
            continue;
        }
        match c.value {
            Some(v) if accepts(v) => {
                metrics.insert(name.clone(), v);
            }
            Some(v) => out.push(
                "aclprofAicoreMetrics",
                format!("library constant `{name}` = {v} is refused by aclprofCreateConfig"),
            ),
            None => {}
        }
    }
    check_enum(
        header,
        "aclprofAicoreMetrics",
        &metrics,
        &|v| accepts(v).then(|| "a metric aclprofCreateConfig accepts".to_owned()),
        out,
    );
}

fn check_consts(header: &Side, lib: &Side, out: &mut Mismatches) {
    let compiled = library_consts();
    for (name, c) in &lib.consts {
        if let (Some(v), Some((_, cv))) = (c.value, compiled.iter().find(|(n, _)| n == name)) {
            if v != *cv {
                out.push(
                    name,
                    format!("types.rs reads as {v}, the compiled constant is {cv} (guard bug?)"),
                );
            }
        }
        let value = c
            .value
            .or_else(|| compiled.iter().find(|(n, _)| n == name).map(|(_, v)| *v));
        let Some(value) = value else {
            out.push(
                name,
                "constant in ffi/src/types.rs whose value the guard cannot evaluate",
            );
            continue;
        };
        match header.consts.get(name) {
            Some(h) if h.value == Some(value) => {}
            Some(h) => out.push(
                name,
                format!(
                    "header {}, library {value}",
                    h.value.map_or_else(|| "?".to_owned(), |v| v.to_string())
                ),
            ),
            None if LIB_ONLY_CONSTS.contains(&name.as_str()) => {}
            None => out.push(
                name,
                format!(
                    "constant in ffi/src/types.rs (= {value}) with no header #define or enum value"
                ),
            ),
        }
    }
    for (name, value) in &compiled {
        if lib.consts.get(*name).and_then(|c| c.value) == Some(*value) {
            continue; // checked above
        }
        match header.consts.get(*name) {
            Some(h) if h.value == Some(*value) => {}
            Some(h) => out.push(
                *name,
                format!(
                    "header {}, library (compiled) {value}",
                    h.value.map_or_else(|| "?".to_owned(), |v| v.to_string())
                ),
            ),
            None if LIB_ONLY_CONSTS.contains(name) => {}
            None => out.push(*name, "library constant with no header #define"),
        }
    }
    // Every ACL constant of the headers has a library constant (compared
    // above), so none is left unchecked.
    for (name, c) in &header.consts {
        if name.starts_with("ACL_") && !lib.consts.contains_key(name) {
            out.push(
                name,
                format!(
                    "header constant (= {}) with no constant in ffi/src/types.rs",
                    c.value.map_or_else(|| "?".to_owned(), |v| v.to_string())
                ),
            );
        }
    }
    // HCCL_CONFIG_NOT_SET stands for every HCCL_COMM_*_CONFIG_NOT_SET of
    // the uint32_t fields (hcclExecTimeOut's, an int32_t -1, has a
    // constant of its own, compared above).
    let not_set = i128::from(hccl::types::HCCL_CONFIG_NOT_SET);
    let mut any = false;
    for (name, c) in &header.consts {
        if name.starts_with("HCCL_COMM_")
            && name.ends_with("_CONFIG_NOT_SET")
            && name != "HCCL_COMM_EXECTIMEOUT_CONFIG_NOT_SET"
        {
            any = true;
            if c.value != Some(not_set) {
                out.push(
                    name,
                    format!(
                        "header {}, library HCCL_CONFIG_NOT_SET {not_set}",
                        c.value.map_or_else(|| "?".to_owned(), |v| v.to_string())
                    ),
                );
            }
        }
    }
    if !any {
        out.push(
            "HCCL_CONFIG_NOT_SET",
            "the headers define no HCCL_COMM_*_CONFIG_NOT_SET to compare with",
        );
    }
}

fn report(list: &[Mismatch]) -> String {
    list.iter()
        .map(|m| format!("  - {m}"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn headers_match_library() {
    let mismatches = check_abi(&include_dir());
    assert!(
        mismatches.is_empty(),
        "{} ABI mismatch(es) between include/{{hccl,acl}} and libhccl (ffi/src):\n{}",
        mismatches.len(),
        report(&mismatches)
    );
}

/// A copy of a directory tree under the system temp dir, removed on drop.
struct TempTree(PathBuf);

impl TempTree {
    fn copy_of(src: &Path, tag: &str) -> TempTree {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let dst = std::env::temp_dir().join(format!(
            "hccl_abi_guard_{tag}_{}_{nanos}",
            std::process::id()
        ));
        copy_tree(src, &dst);
        TempTree(dst)
    }
}

impl Drop for TempTree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn copy_tree(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).expect("create temp include dir");
    for e in std::fs::read_dir(src).expect("read include dir").flatten() {
        let to = dst.join(e.file_name());
        if e.path().is_dir() {
            copy_tree(&e.path(), &to);
        } else {
            std::fs::copy(e.path(), &to).expect("copy header");
        }
    }
}

/// Replaces `from` with `to` inside the first span of `file` that starts at
/// `anchor` and ends at `end` (a declaration); panics if nothing changes, so
/// a header edit cannot silently turn the mutation test into a no-op.
fn mutate(file: &Path, anchor: &str, end: char, from: &str, to: &str) {
    let text = std::fs::read_to_string(file).expect("read header");
    let start = text
        .find(anchor)
        .unwrap_or_else(|| panic!("`{anchor}` not found in {}", file.display()));
    let stop = start
        + text[start..]
            .find(end)
            .unwrap_or_else(|| panic!("no `{end}` after `{anchor}`"));
    let span = &text[start..stop];
    assert!(
        span.contains(from),
        "`{from}` not found in the declaration starting `{anchor}`:\n{span}"
    );
    let new = format!(
        "{}{}{}",
        &text[..start],
        span.replacen(from, to, 1),
        &text[stop..]
    );
    std::fs::write(file, new).expect("write mutated header");
}

#[test]
fn guard_catches_changed_signature_and_struct() {
    let baseline = check_abi(&include_dir());
    let tree = TempTree::copy_of(&include_dir(), "mutated");
    let hccl_h = tree.0.join("hccl/hccl.h");
    let types_h = tree.0.join("hccl/hccl_types.h");
    // A function parameter: count becomes 32-bit.
    mutate(
        &hccl_h,
        "HcclAllReduce(",
        ';',
        "uint64_t count",
        "uint32_t count",
    );
    // A struct field that changes the layout...
    mutate(
        &types_h,
        "struct HcclSendRecvItemDef {",
        '}',
        "uint32_t remoteRank;",
        "uint64_t remoteRank;",
    );
    // ...and one that keeps it (only the field type check sees this).
    mutate(
        &types_h,
        "struct HcclCommConfigDef {",
        '}',
        "uint32_t hcclDeterministic;",
        "int32_t hcclDeterministic;",
    );
    // An enum value and a #define.
    mutate(&types_h, "HCCL_DATA_TYPE_FP64 = 10", ',', "= 10", "= 13");
    // HCCL's FP8 types: a changed value, and a renamed constant (seen
    // both ways: the library's name has no header constant, and the
    // header's new name has a value the library decodes as something else).
    mutate(&types_h, "HCCL_DATA_TYPE_FP8E5M2 = 16", ',', "= 16", "= 13");
    mutate(
        &types_h,
        "HCCL_DATA_TYPE_HIF8 = 14",
        ',',
        "HIF8",
        "HIFLOAT8",
    );
    mutate(
        &tree.0.join("acl/acl_base.h"),
        "#define ACL_ERROR_BAD_ALLOC ",
        '\n',
        "200000",
        "200001",
    );
    // issue 31's constants: a general and a runtime error code, an event
    // flag, an enum value, and an enum value renamed (the header's new name
    // has no library constant, the library's has no header constant)
    let base_h = tree.0.join("acl/acl_base.h");
    let rt_h = tree.0.join("acl/acl_rt.h");
    mutate(
        &base_h,
        "#define ACL_ERROR_INVALID_MODEL_ID ",
        '\n',
        "100011",
        "100012",
    );
    mutate(
        &base_h,
        "#define ACL_ERROR_RT_MEMORY_ALLOCATION ",
        '\n',
        "207001",
        "207002",
    );
    mutate(
        &rt_h,
        "#define ACL_EVENT_TIME_LINE ",
        '\n',
        "0x00000008U",
        "0x00000004U",
    );
    mutate(
        &rt_h,
        "ACL_MEMCPY_INTER_DEVICE_TO_DEVICE = 7",
        ',',
        "= 7",
        "= 8",
    );
    mutate(
        &rt_h,
        "ACL_STREAM_STATUS_RESERVED = ",
        ',',
        "RESERVED",
        "RESERVED_",
    );
    // acl_prof.h: a parameter's constness, an enum value, a flag, and an
    // opaque type given a definition.
    let prof_h = tree.0.join("acl/acl_prof.h");
    mutate(
        &prof_h,
        "aclprofStart(",
        ';',
        "const aclprofConfig",
        "aclprofConfig",
    );
    mutate(&prof_h, "ACL_AICORE_MEMORY_ACCESS = 8", ',', "= 8", "= 9");
    mutate(
        &prof_h,
        "#define ACL_PROF_HCCL_TRACE ",
        '\n',
        "0x0020ULL",
        "0x0040ULL",
    );
    mutate(
        &prof_h,
        "typedef struct aclprofAicoreEvents ",
        ';',
        "aclprofAicoreEvents aclprofAicoreEvents",
        "aclprofAicoreEvents { uint32_t events; } aclprofAicoreEvents",
    );
    // issue 18's surface: a version-11 config field, a parameter of a
    // virtual-memory call and of a one-sided call
    mutate(
        &types_h,
        "typedef struct HcclCommConfigDef {",
        '}',
        "uint32_t hcclChannelSqDepth;",
        "uint64_t hcclChannelSqDepth;",
    );
    mutate(
        &tree.0.join("acl/acl_rt.h"),
        "aclError aclrtMapMem(",
        ';',
        "size_t offset",
        "uint32_t offset",
    );
    mutate(
        &tree.0.join("hccl/hccl_ex.h"),
        "HcclResult HcclBatchPut(",
        ';',
        "uint32_t descNum",
        "uint64_t descNum",
    );
    let mutated = check_abi(&tree.0);
    let new: Vec<Mismatch> = mutated
        .iter()
        .filter(|m| !baseline.contains(m))
        .cloned()
        .collect();
    let listing = report(&new);
    let lib_item_size = format!(
        "library {}",
        std::mem::size_of::<hccl::types::HcclSendRecvItem>()
    );
    let has = |item: &str, parts: &[&str]| {
        new.iter()
            .any(|m| m.item == item && parts.iter().all(|p| m.detail.contains(p)))
    };
    assert!(
        has(
            "HcclAllReduce",
            &["parameter 2 `count`", "header `u32`", "library `u64`"]
        ),
        "HcclAllReduce's count parameter not reported; new mismatches:\n{listing}"
    );
    assert!(
        has(
            "HcclSendRecvItem",
            &["field 4 `remoteRank`", "header `u64`", "library `u32`"]
        ),
        "HcclSendRecvItem::remoteRank's type not reported; new mismatches:\n{listing}"
    );
    assert!(
        has("HcclSendRecvItem", &["size: header", &lib_item_size]),
        "HcclSendRecvItem's size not reported; new mismatches:\n{listing}"
    );
    assert!(
        has(
            "HcclCommConfig",
            &["`hcclDeterministic`", "header `i32`", "library `u32`"]
        ),
        "HcclCommConfig::hcclDeterministic's type not reported; new mismatches:\n{listing}"
    );
    assert!(
        has(
            "HcclCommConfig",
            &["`hcclChannelSqDepth`", "header `u64`", "library `u32`"]
        ),
        "HcclCommConfig::hcclChannelSqDepth's type not reported; new mismatches:\n{listing}"
    );
    assert!(
        has(
            "aclrtMapMem",
            &["`offset`", "header `u32`", "library `usize`"]
        ),
        "aclrtMapMem's offset parameter not reported; new mismatches:\n{listing}"
    );
    assert!(
        has(
            "HcclBatchPut",
            &["`descNum`", "header `u64`", "library `u32`"]
        ),
        "HcclBatchPut's descNum parameter not reported; new mismatches:\n{listing}"
    );
    assert!(
        has(
            "HcclDataType",
            &["`HCCL_DATA_TYPE_FP64`: header 13, library 10"]
        ),
        "HCCL_DATA_TYPE_FP64's value not reported; new mismatches:\n{listing}"
    );
    assert!(
        has(
            "HcclDataType",
            &["`HCCL_DATA_TYPE_FP8E5M2`: header 13, library 16"]
        ),
        "HCCL_DATA_TYPE_FP8E5M2's value not reported; new mismatches:\n{listing}"
    );
    assert!(
        has(
            "HcclDataType",
            &["library value `HCCL_DATA_TYPE_HIF8` = 14 has no header constant"]
        ),
        "HCCL_DATA_TYPE_HIF8 missing from the header not reported; new mismatches:\n{listing}"
    );
    assert!(
        has(
            "HcclDataType",
            &["header `HCCL_DATA_TYPE_HIFLOAT8` = 14, but the library decodes 14 as Hif8"]
        ),
        "HCCL_DATA_TYPE_HIFLOAT8 not reported; new mismatches:\n{listing}"
    );
    assert!(
        has("ACL_ERROR_BAD_ALLOC", &["header 200001, library 200000"]),
        "ACL_ERROR_BAD_ALLOC's value not reported; new mismatches:\n{listing}"
    );
    assert!(
        has(
            "aclprofStart",
            &[
                "parameter 0 `profilerConfig`",
                "header `*mut aclprofConfig`",
                "library `*const aclprofConfig`"
            ]
        ),
        "aclprofStart's parameter not reported; new mismatches:\n{listing}"
    );
    assert!(
        has(
            "aclprofAicoreMetrics",
            &["`ACL_AICORE_MEMORY_ACCESS`: header 9, library 8"]
        ),
        "ACL_AICORE_MEMORY_ACCESS's enum value not reported; new mismatches:\n{listing}"
    );
    assert!(
        has("ACL_AICORE_MEMORY_ACCESS", &["header 9, library 8"]),
        "ACL_AICORE_MEMORY_ACCESS's constant not reported; new mismatches:\n{listing}"
    );
    assert!(
        has(
            "ACL_ERROR_INVALID_MODEL_ID",
            &["header 100012, library 100011"]
        ),
        "ACL_ERROR_INVALID_MODEL_ID's value not reported; new mismatches:\n{listing}"
    );
    assert!(
        has(
            "ACL_ERROR_RT_MEMORY_ALLOCATION",
            &["header 207002, library 207001"]
        ),
        "ACL_ERROR_RT_MEMORY_ALLOCATION's value not reported; new mismatches:\n{listing}"
    );
    assert!(
        has("ACL_EVENT_TIME_LINE", &["header 4, library 8"]),
        "ACL_EVENT_TIME_LINE's value not reported; new mismatches:\n{listing}"
    );
    assert!(
        has(
            "ACL_MEMCPY_INTER_DEVICE_TO_DEVICE",
            &["header 8, library 7"]
        ),
        "ACL_MEMCPY_INTER_DEVICE_TO_DEVICE's value not reported; new mismatches:\n{listing}"
    );
    assert!(
        has(
            "ACL_STREAM_STATUS_RESERVED_",
            &["header constant (= 65535) with no constant in ffi/src/types.rs"]
        ),
        "a header ACL constant without a library constant not reported; new mismatches:\n{listing}"
    );
    assert!(
        has(
            "ACL_STREAM_STATUS_RESERVED",
            &["constant in ffi/src/types.rs (= 65535) with no header #define or enum value"]
        ),
        "a library ACL constant without a header constant not reported; new mismatches:\n{listing}"
    );
    assert!(
        has("ACL_PROF_HCCL_TRACE", &["header 64, library 32"]),
        "ACL_PROF_HCCL_TRACE's value not reported; new mismatches:\n{listing}"
    );
    assert!(
        has(
            "aclprofAicoreEvents",
            &["field 0: header `events`, library `_unused`"]
        ),
        "aclprofAicoreEvents given a definition not reported; new mismatches:\n{listing}"
    );
    // Nothing else moved: every new mismatch is about what was changed.
    let unrelated: Vec<&Mismatch> = new
        .iter()
        .filter(|m| {
            ![
                "HcclAllReduce",
                "HcclBatchPut",
                "aclrtMapMem",
                "HcclSendRecvItem",
                "HcclCommConfig",
                "HcclDataType",
                "ACL_ERROR_BAD_ALLOC",
                "ACL_ERROR_INVALID_MODEL_ID",
                "ACL_ERROR_RT_MEMORY_ALLOCATION",
                "ACL_EVENT_TIME_LINE",
                "ACL_MEMCPY_INTER_DEVICE_TO_DEVICE",
                "ACL_STREAM_STATUS_RESERVED",
                "ACL_STREAM_STATUS_RESERVED_",
                "aclprofStart",
                "aclprofAicoreMetrics",
                "ACL_AICORE_MEMORY_ACCESS",
                "ACL_PROF_HCCL_TRACE",
                "aclprofAicoreEvents",
            ]
            .contains(&m.item.as_str())
        })
        .collect();
    assert!(
        unrelated.is_empty(),
        "mutation produced unrelated mismatches: {unrelated:?}"
    );
}
