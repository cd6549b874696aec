#!/usr/bin/perl
# ckpt-edit.pl IN OUT EXPR [resign] - a copy of checkpoint IN with its JSON header edited
# by the Perl substitution EXPR (e.g. 's/"epoch":"0"/"epoch":"7"/'); with "resign", the
# header's sha256 is recomputed as ddptrain computes it (SHA-256 of the header, padded with
# spaces to a multiple of 8, with the sha256 value as 64 zeros, then the tensor data), so
# only the range checks can refuse the file.
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
eval "\$h =~ $expr; 1" or die "bad EXPR: $@";
$h .= ' ' x ((8 - length($h) % 8) % 8);
if ($resign) {
	$h =~ s/("sha256":")[0-9a-f]{64}/$1 . ('0' x 64)/e;
	my $sha = sha256_hex($h . $d);
	$h =~ s/("sha256":")0{64}/$1$sha/;
}
open(my $o, '>:raw', $out) or die "$out: $!";
print $o pack('Q<', length($h)), $h, $d;
close $o;
