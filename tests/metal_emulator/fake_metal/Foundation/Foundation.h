// A minimal stand-in for Apple's Foundation, enough for csrc/backend/metal/*.mm
// to compile and run on Linux with only an Objective-C runtime (GCC's
// libobjc, clang -fobjc-runtime=gcc): a root class with manual reference
// counting, autorelease pools (what @autoreleasepool lowers to on this
// runtime), NSString and NSError. Implemented in fake_metal.mm.
//
// Object lifetimes follow Cocoa's rules so the host code's retain/release
// discipline is exercised: alloc/new/copy give +1, other getters return
// autoreleased objects, and the tests check that every fake object was
// deallocated (fake_metal_live_objects()).
#pragma once

#import <objc/objc.h>
#import <objc/runtime.h>

typedef unsigned long NSUInteger;
typedef long NSInteger;

@protocol NSObject
- (id)retain;
- (oneway void)release;
- (id)autorelease;
- (NSUInteger)retainCount;
@end

__attribute__((objc_root_class))
@interface NSObject <NSObject> {
  Class isa;
  NSUInteger muser_retain_count_;
}
+ (id)alloc;
- (id)init;
- (void)dealloc;
@end

@interface NSAutoreleasePool : NSObject {
 @public
  void* muser_objects_;  // std::vector<id>*, objects to release at drain
  NSAutoreleasePool* muser_outer_;
}
- (void)drain;
@end

@interface NSString : NSObject {
  char* muser_utf8_;
}
+ (NSString*)stringWithUTF8String:(const char*)text;
- (const char*)UTF8String;
@end

@interface NSError : NSObject {
  NSString* muser_description_;
}
+ (NSError*)muserErrorWithText:(const char*)text;  // the fake's own constructor
- (NSString*)localizedDescription;
@end

// Fake objects currently alive (all classes above and in Metal.h).
extern "C" long fake_metal_live_objects(void);
