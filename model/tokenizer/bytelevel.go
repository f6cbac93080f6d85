package tokenizer

// The GPT-2 byte-to-character table: printable bytes map to themselves, the
// others to U+0100 and up, so that every byte string is a printable string.
var (
	byteToRune [256]rune
	byteToStr  [256]string
	runeToByte [0x144]int16 // -1 where the rune is not in the alphabet
)

func init() {
	for i := range runeToByte {
		runeToByte[i] = -1
	}
	n := 0
	for b := 0; b < 256; b++ {
		printable := (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)
		r := rune(b)
		if !printable {
			r = rune(256 + n)
			n++
		}
		byteToRune[b] = r
		byteToStr[b] = string(r)
		runeToByte[r] = int16(b)
	}
}

// byteLevelDecodeToken appends the bytes token stands for: the byte of each
// character when all are in the alphabet, else the token's own UTF-8 bytes.
func byteLevelDecodeToken(dst []byte, token string) []byte {
	n := len(dst)
	for _, r := range token {
		if r >= 0 && int(r) < len(runeToByte) && runeToByte[r] >= 0 {
			dst = append(dst, byte(runeToByte[r]))
			continue
		}
		return append(dst[:n], token...)
	}
	return dst
}

// byteLevelRaw returns the raw bytes a byte-level token stands for, and false
// when a character is outside the alphabet.
func byteLevelRaw(token string) (string, bool) {
	buf := make([]byte, 0, len(token))
	for _, r := range token {
		if r < 0 || int(r) >= len(runeToByte) || runeToByte[r] < 0 {
			return "", false
		}
		buf = append(buf, byte(runeToByte[r]))
	}
	return string(buf), true
}
