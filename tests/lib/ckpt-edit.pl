#!/usr/bin/perl
# ckpt-edit.pl IN OUT EXPR [resign] - a copy of checkpoint IN with its JSON header edited
# by the Perl substitution EXPR (e.g. 's/"epoch":"0"/"epoch":"7"/'); with "resign", the
# header's sha256 is recomputed as ddptrain computes it (SHA-256 of the header, padded with
# spaces to a multiple of 8, with the sha256 value as 64 zeros, then the tensor data), so
# only the range checks can refuse the file. EXPR "set NAME[I]=VALUE" instead writes the
# float32 VALUE (a number, nan, inf or -inf) at flat element I of tensor NAME's data.
use strict;
use warnings;
use Digest::SHA qw(sha256_hex);

my ($in, $out, $expr, $resign) = @ARGV;
open(my $f, '<:raw', $in) or die "$in: $!";
my $b = do { local $/; <$f> };
close $f;
my $n = unpack('Q<', substr($b, 0, 8));
my ($h, $d) = (substr($b, 8, $n), substr($b, 8 + $n));
$h =~ s/\s+$//;
if ($expr =~ /^set ([\w.]+)\[(\d+)\]=(\S+)$/) {
	my ($name, $i, $v) = ($1, $2, $3);
	$h =~ /"\Q$name\E":\{[^}]*"data_offsets":\[(\d+),(\d+)\]/ or die "no tensor $name";
	my ($lo, $hi) = ($1, $2);
	die "element $i is past $name" if $lo + 4 * ($i + 1) > $hi;
	my $bits = $v eq 'nan' ? pack('L<', 0x7fc00000) : $v eq 'inf' ? pack('L<', 0x7f800000)
		 : $v eq '-inf' ? pack('L<', 0xff800000) : pack('f<', $v);
	substr($d, $lo + 4 * $i, 4) = $bits;
} else {
	eval "\$h =~ $expr; 1" or die "bad EXPR: $@";
}
$h .= ' ' x ((8 - length($h) % 8) % 8);
if ($resign) {
	$h =~ s/("sha256":")[0-9a-f]{64}/$1 . ('0' x 64)/e;
	my $sha = sha256_hex($h . $d);
	$h =~ s/("sha256":")0{64}/$1$sha/;
}
open(my $o, '>:raw', $out) or die "$out: $!";
print $o pack('Q<', length($h)), $h, $d;
close $o;
