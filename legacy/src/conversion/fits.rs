//! Whether a canonical value fits its column exactly: the digits a
//! `numeric(p,s)` or a `timestamp(p)` keeps, the amounts a `money` holds.
//! A value PostgreSQL would round is refused rather than stored changed.

use super::shown;

/// Whether a canonical decimal (`"-12.5"`, `"NaN"`) fits a `numeric(p,s)`
/// of type modifier `typmod` exactly: PostgreSQL rounds it to the scale
/// (the value would change) and refuses what is then too large. `Err`
/// says which.
pub fn numeric_fits(text: &str, typmod: i32) -> Result<(), String> {
    if typmod < 4 {
        return Ok(());
    }
    let precision = ((typmod - 4) >> 16) & 0xffff;
    let scale = (((typmod - 4) & 0x7ff) ^ 1024) - 1024;
    let kind = format!("numeric({precision},{scale})");
    let digits = text.trim_start_matches('-');
    match digits {
        "NaN" => return Ok(()),
        "Infinity" => return Err(format!("{kind} cannot hold an infinite value")),
        _ => {}
    }
    let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
    let whole = whole.trim_start_matches('0');
    let fraction = fraction.trim_end_matches('0');
    if whole.is_empty() && fraction.is_empty() {
        return Ok(());
    }
    // Digits the scale does not keep: a fraction past it, or (a negative
    // scale) the units it rounds away.
    let kept = if scale >= 0 {
        fraction.len() <= scale as usize
    } else {
        fraction.is_empty()
            && whole.len() - whole.trim_end_matches('0').len() >= scale.unsigned_abs() as usize
    };
    if !kept {
        return Err(format!(
            "{text} has more digits than {kind} keeps: PostgreSQL would round it"
        ));
    }
    // Its highest digit's power of ten, plus one: 12.5 is 2, 0.05 is -1.
    let weight = if whole.is_empty() {
        -((fraction.len() - fraction.trim_start_matches('0').len()) as i32)
    } else {
        whole.len() as i32
    };
    if weight > precision - scale {
        return Err(format!(
            "{text} is too large for {kind} (numeric field overflow)"
        ));
    }
    Ok(())
}

/// The fraction digits a `money` keeps: the layout refuses a server
/// whose `lc_monetary` keeps another number.
pub const MONEY_SCALE: usize = 2;

/// Whether a canonical decimal is an amount a `money` holds exactly: a
/// number (not `NaN` or infinite) of at most [`MONEY_SCALE`] fraction
/// digits (PostgreSQL rounds a third away), whose cents fit the 64-bit
/// integer PostgreSQL keeps.
pub fn money_fits(text: &str) -> Result<(), String> {
    let named = shown(text);
    let digits = text.strip_prefix('-').unwrap_or(text);
    if !digits.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return Err(format!("{named} is not an amount money can hold"));
    }
    let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
    if fraction.len() > MONEY_SCALE {
        return Err(format!(
            "{named} has more than {MONEY_SCALE} fraction digits: money would round it"
        ));
    }
    let cents = format!("{whole}{fraction:0<MONEY_SCALE$}");
    let cents: i128 = cents
        .parse()
        .map_err(|_| format!("{named} is out of range for type money"))?;
    let cents = if text.starts_with('-') { -cents } else { cents };
    if i64::try_from(cents).is_err() {
        return Err(format!(
            "{named} is out of range for type money (-92233720368547758.08 to 92233720368547758.07)"
        ));
    }
    Ok(())
}

/// Whether a canonical timestamp (six fraction digits) fits a
/// `timestamp(p)` of type modifier `typmod`: PostgreSQL rounds the
/// fraction past `p` digits.
pub fn timestamp_fits(text: &str, typmod: i32) -> Result<(), String> {
    let Ok(keeps) = usize::try_from(typmod) else {
        return Ok(());
    };
    let fraction = text
        .rsplit_once('.')
        .map_or("", |(_, f)| f.trim_end_matches('Z'));
    if fraction.len() > keeps && fraction[keeps..].bytes().any(|b| b != b'0') {
        return Err(format!(
            "{text} has more fraction digits than a precision of {keeps} keeps: PostgreSQL would round it"
        ));
    }
    Ok(())
}
