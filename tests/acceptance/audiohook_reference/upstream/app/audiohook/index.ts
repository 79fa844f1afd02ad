export * from './src';
