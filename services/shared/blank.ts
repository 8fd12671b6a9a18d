// What a reader sees as nothing. `trim()` knows whitespace only, and text of
// zero-width or format characters (U+200B, a bidi control, a soft hyphen) or
// of the blank-looking fillers (U+3164, the braille blank U+2800) passed it:
// a "not blank" description showed the customer an empty line.
const SHOWS_NOTHING = /^[\p{White_Space}\p{Cf}\u115f\u1160\u2800\u3164\uffa0]*$/u;

/** True for text in which no character shows. */
export const isBlank = (text: string): boolean => SHOWS_NOTHING.test(text);
